#!/usr/bin/python3
"""kubesim's process kubelet (rules M1-M4, J6) and faults: binding, podIP per pod, env from
values/fieldRefs/Secrets/ConfigMaps, restartPolicy Never/OnFailure (back-off, CrashLoopBackOff),
Always with a failing liveness probe, readiness probe, graceful deletion (SIGTERM then SIGKILL),
node NotReady, server restart. Needs KS_URL; kubesim started with KUBESIM_BACKOFF_BASE_S=1."""
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ksapi import check, delete, fail, get, ok, post, req, wait_for, watch  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"


def pod(name, cmd, restart="Never", labels=None, grace=None, **cextra):
    c = {"name": "main", "image": "busybox", "command": ["sh", "-c", cmd]}
    c.update(cextra)
    spec = {"restartPolicy": restart, "containers": [c]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": "web"}},
            "spec": spec}


def getpod(name):
    return get(PODS + "/" + name)[2]


def phase(name):
    return (getpod(name).get("status") or {}).get("phase")


def cstatus(name):
    cs = (getpod(name).get("status") or {}).get("containerStatuses") or [{}]
    return cs[0]


def logs(name):
    s, _, body = get(PODS + "/" + name + "/log")
    return body if isinstance(body, str) else json.dumps(body)


# env from values, fieldRefs, Secret and ConfigMap keys; podIP per pod
post("/api/v1/namespaces/default/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"},
                                             "stringData": {"token": "s3cret"}})
post("/api/v1/namespaces/default/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                                                "data": {"mode": "fast"}})
env = [{"name": "A", "value": "plain"},
       {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
       {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
       {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
       {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
       {"name": "TOK", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
       {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
       {"name": "REF", "value": "$(A)-x"}]
post(PODS, pod("envp", 'echo "$A $POD $NS $APP $IP $TOK $MODE $REF"', env=env))
wait_for(lambda: phase("envp") == "Succeeded", "env pod did not succeed")
p = getpod("envp")
ip = p["status"]["podIP"]
check(re.match(r"^127\.0\.\d+\.\d+$", ip) and p["status"]["podIPs"] == [{"ip": ip}] and
      p["status"]["hostIP"] == "127.0.0.1" and p["spec"]["nodeName"] == "kubesim-node",
      "M1/M3 bound to kubesim-node, podIP on loopback, podIPs, hostIP", p["status"].get("podIP"))
check(logs("envp").strip() == "plain envp default web %s s3cret fast plain-x" % ip,
      "env: value, fieldRef name/namespace/labels/podIP, secretKeyRef, configMapKeyRef, $(VAR)", logs("envp"))
cs = cstatus("envp")
check(cs["state"]["terminated"]["exitCode"] == 0 and cs["state"]["terminated"]["reason"] == "Completed" and
      cs["restartCount"] == 0 and cs["imageID"] and cs["containerID"],
      "M3 containerStatuses terminated Completed exitCode 0", cs)
conds = {c["type"]: c for c in p["status"]["conditions"]}
check(set(conds) == {"PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"} and
      conds["Ready"]["status"] == "False" and conds["Ready"].get("reason") == "PodCompleted",
      "M2 conditions; Ready False with PodCompleted at the end", conds.get("Ready"))

# --image-map: the image's entrypoint is the mapped program (tag ignored), args appended
s, _, o = post(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mapped"},
                      "spec": {"restartPolicy": "Never", "containers": [
                          {"name": "m", "image": "kubesim/echo:v2", "args": ["mapped", "$(X)"],
                           "env": [{"name": "X", "value": "ok"}]}]}})
wait_for(lambda: phase("mapped") == "Succeeded", "image-mapped pod did not succeed")
check(logs("mapped").strip() == "mapped ok", "--image-map IMAGE=PROGRAM (tag ignored), args with $(VAR)", logs("mapped"))
s, _, o = post(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unmapped"},
                      "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "nosuch/image"}]}})
wait_for(lambda: (cstatus("unmapped").get("state") or {}).get("waiting", {}).get("reason") == "ErrImagePull",
         "unmapped image without command should wait with ErrImagePull")
ok("an image with no mapping and no command waits with ErrImagePull")
# follow: the stream carries lines as they are written and ends when the container exits
post(PODS, pod("follow", "for i in 1 2 3; do echo line$i; sleep 0.3; done"))
wait_for(lambda: phase("follow") == "Running", "follow pod not running")
t0 = time.time()
s, _, body = get(PODS + "/follow/log?follow=true", timeout=20)
check(s == 200 and body.split() == ["line1", "line2", "line3"] and time.time() - t0 < 10,
      "logs follow=true streams until the container exits", body)
s, _, body = get(PODS + "/follow/log?tailLines=1")
check(body == "line3\n", "logs tailLines=1", body)

# restartPolicy Never with a failure
post(PODS, pod("fail", "echo boom; exit 3"))
wait_for(lambda: phase("fail") == "Failed", "Never + exit 3 -> Failed")
cs = cstatus("fail")
check(cs["state"]["terminated"]["exitCode"] == 3 and cs["state"]["terminated"]["reason"] == "Error" and
      cs["restartCount"] == 0, "M4 Never: Failed, exitCode 3, reason Error, no restart", cs)

# OnFailure: restarts with back-off (base 1 s for the test), CrashLoopBackOff, lastState
post(PODS, pod("onf", "echo run; exit 4", restart="OnFailure"))
wait_for(lambda: cstatus("onf").get("restartCount", 0) >= 2, "OnFailure did not restart twice", secs=25)
cs = cstatus("onf")
check(cs["lastState"]["terminated"]["exitCode"] == 4 and phase("onf") in ("Running", "Pending"),
      "M4 OnFailure: restartCount grows, lastState.terminated.exitCode, pod not Failed", cs)
wait_for(lambda: (cstatus("onf").get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff",
         "no CrashLoopBackOff", secs=15, interval=0.02)
ok("M4 OnFailure back-off shows waiting CrashLoopBackOff")
def reasons(pod):
    s, _, o = get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D" + pod)
    return [e["reason"] for e in o["items"]]


check({"Scheduled", "Started", "BackOff"} <= set(reasons("onf")), "kubelet events: Scheduled, Started, BackOff",
      reasons("onf"))
s, _, prev = get(PODS + "/onf/log?previous=true")
check(s == 200 and "run" in prev, "logs ?previous=true of a restarted container")
post(PODS, pod("onf-ok", "exit 0", restart="OnFailure"))
wait_for(lambda: phase("onf-ok") == "Succeeded", "OnFailure + exit 0 -> Succeeded")
ok("M4 OnFailure + exit 0 -> Succeeded, no restart")

# readiness probe (httpGet against podIP:port) and Always + failing liveness probe
srv = "exec python3 -m http.server 8080 --bind $IP"
post(PODS, pod("ready", srv, restart="Always",
               env=[{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
               readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}))
wait_for(lambda: cstatus("ready").get("ready") is True, "readiness probe never passed", secs=20)
conds = {c["type"]: c["status"] for c in getpod("ready")["status"]["conditions"]}
check(conds["Ready"] == "True" and conds["ContainersReady"] == "True" and phase("ready") == "Running",
      "M2/probes: httpGet readiness on podIP:port -> Ready True", conds)
post(PODS, pod("live", "sleep 300", restart="Always",
               livenessProbe={"httpGet": {"path": "/healthz", "port": 9}, "periodSeconds": 1, "failureThreshold": 1}))
wait_for(lambda: cstatus("live").get("restartCount", 0) >= 1, "failing liveness probe did not restart", secs=20)
cs = cstatus("live")
check(cs["lastState"]["terminated"].get("signal") == 9, "liveness failure kills the container (signal 9), Always restarts", cs)
check("Unhealthy" in reasons("live"), "kubelet event: Unhealthy on a liveness failure", reasons("live"))
s, _, o = get(PODS + "?fieldSelector=status.phase%3DRunning,spec.nodeName%3Dkubesim-node")
check("ready" in [i["metadata"]["name"] for i in o["items"]], "K5 pods: status.phase + spec.nodeName selectors")
ips = {getpod(n)["status"]["podIP"] for n in ("envp", "ready", "live")}
check(len(ips) == 3, "every pod has its own loopback address", ips)

# graceful deletion: SIGTERM ignored -> SIGKILL after the grace period, then removed
post(PODS, pod("stubborn", 'trap "" TERM; echo started; while true; do sleep 0.2; done', restart="Always", grace=2))
wait_for(lambda: phase("stubborn") == "Running", "stubborn not running")
t0 = time.time()
s, _, o = delete(PODS + "/stubborn")
check(s == 200 and o["metadata"].get("deletionTimestamp") and o["metadata"]["deletionGracePeriodSeconds"] == 2,
      "J6 pod delete: deletionTimestamp = now + grace, object returned", o.get("metadata"))
time.sleep(1)
check(get(PODS + "/stubborn")[0] == 200, "J6 pod stays Terminating during the grace period")
wait_for(lambda: get(PODS + "/stubborn")[0] == 404, "pod not removed after SIGKILL", secs=10)
el = time.time() - t0
check(1.8 < el < 12, "J6 SIGTERM ignored -> SIGKILL after grace, then removed (%.1fs)" % el, el)
check("Killing" in reasons("stubborn"), "kubelet event: Killing on deletion", reasons("stubborn"))

# node NotReady: deleting pods stay Terminating until the node is back
post(PODS, pod("nr", "sleep 300", restart="Always", grace=1))
wait_for(lambda: phase("nr") == "Running", "nr not running")
post("/kubesim/node-not-ready", {})
s, _, node = get("/api/v1/nodes/kubesim-node")
check([c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"] == ["False"],
      "fault: node Ready=False")
delete(PODS + "/nr")
time.sleep(2.5)
check(get(PODS + "/nr")[0] == 200, "fault: NotReady node -> deleting pod stays Terminating")
post("/kubesim/node-ready", {})
wait_for(lambda: get(PODS + "/nr")[0] == 404, "pod not removed after node came back", secs=10)
ok("fault: node back -> pod finishes deletion")

# init containers: run first, one at a time in order, each to exit 0; the app container waits in
# PodInitializing (Initialized False, phase Pending); a failed one under restartPolicy Never fails the pod
f = "/tmp/kubesim-init-%d.txt" % os.getpid()
ip = pod("initp", "cat " + f + "; rm -f " + f)
ip["spec"]["initContainers"] = [{"name": "one", "image": "busybox", "command": ["sh", "-c", "sleep 1; echo a >> " + f]},
                                {"name": "two", "image": "busybox", "command": ["sh", "-c", "echo b >> " + f]}]
post(PODS, ip)
time.sleep(0.5)
st = getpod("initp").get("status") or {}
ic = {c["type"]: c["status"] for c in st.get("conditions", [])}
w = ((st.get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting") or {}
check(st.get("phase") == "Pending" and ic.get("Initialized") == "False" and w.get("reason") == "PodInitializing",
      "init containers: the app container waits in PodInitializing", st)
wait_for(lambda: phase("initp") == "Succeeded", "init pod did not succeed")
st = getpod("initp")["status"]
check(logs("initp").split() == ["a", "b"], "init containers ran in order before the app container", logs("initp"))
check([c["state"]["terminated"]["exitCode"] for c in st["initContainerStatuses"]] == [0, 0] and
      {c["type"]: c["status"] for c in st["conditions"]}["Initialized"] == "True",
      "initContainerStatuses terminated 0, Initialized True", st)
fp = pod("initfail", "echo never")
fp["spec"]["initContainers"] = [{"name": "one", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]
post(PODS, fp)
wait_for(lambda: phase("initfail") == "Failed", "a failed init container under Never did not fail the pod")
st = getpod("initfail")["status"]
check(st["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 3 and
      "waiting" in st["containerStatuses"][0]["state"], "the app container never started after a failed init", st)

# faults: fail next N, delay; restart keeps state and drops watchers
post("/kubesim/faults", {"failNext": 2, "code": 429, "verb": "list", "resource": "configmaps"})
s1 = get("/api/v1/namespaces/default/configmaps")[0]
s2 = get("/api/v1/namespaces/default/configmaps")[0]
s3 = get("/api/v1/namespaces/default/configmaps")[0]
check((s1, s2, s3) == (429, 429, 200), "fault: fail the next 2 list configmaps with 429", (s1, s2, s3))
post("/kubesim/faults", {"failNext": 1, "code": 500})
s, _, o = get(PODS)
check(s == 500 and o["kind"] == "Status", "fault: next request 500 Status")
post("/kubesim/faults", {"delayMs": 300})
t0 = time.time()
get(PODS)
check(time.time() - t0 >= 0.3, "fault: delay responses")
post("/kubesim/faults", {"delayMs": 0})
s, _, lst = get("/api/v1/namespaces/default/configmaps")
t0 = time.time()
import threading  # noqa: E402
res = {}
th = threading.Thread(target=lambda: res.update(r=watch("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion="
                                                        + lst["metadata"]["resourceVersion"], 15)))
th.start()
time.sleep(0.5)
post("/kubesim/restart", {})
th.join(20)
check(res["r"][2] and time.time() - t0 < 10, "fault: restart ends every watch stream", res.get("r"))
wait_for(lambda: get("/api/v1/namespaces/default/configmaps/cfg")[0] == 200, "server did not come back")
ok("fault: restart keeps state, same port")
reqs = get("/kubesim/requests?verb=watch&resource=configmaps")[2]["items"]
check(reqs and reqs[0]["group"] == "" and reqs[0]["namespace"] == "default", "request log records verb/group/resource/namespace")
print("all kubelet and fault checks passed")
