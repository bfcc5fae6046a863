#!/usr/bin/python3
"""kubesim checks through Debian's python3-kubernetes (the official client):
CRUD, 409 AlreadyExists / Conflict, 404, and an informer-style loop whose watch survives a 410
(injected through /kubesim/faults) by re-listing. Exit 0 on success, 1 with a message otherwise."""
import json
import os
import sys
import threading
import time
import urllib.request

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

URL = os.environ["KS_URL"]
config.load_kube_config(os.environ["KUBECONFIG"])
v1 = client.CoreV1Api()
NS = "default"


def ok(msg):
    print("ok - " + msg, flush=True)


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def admin(path, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(URL + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"{}")


def expect_api_error(fn, status, reason, what):
    try:
        fn()
    except ApiException as e:
        body = json.loads(e.body) if e.body else {}
        if e.status != status or body.get("reason") != reason or body.get("kind") != "Status":
            fail("%s: got %s %s" % (what, e.status, e.body))
        ok(what)
        return body
    fail(what + ": no error")


# ---- CRUD and errors --------------------------------------------------------------------------
cm = v1.create_namespaced_config_map(NS, {"metadata": {"name": "c1"}, "data": {"a": "1"}})
if not cm.metadata.uid or not cm.metadata.resource_version or not cm.metadata.creation_timestamp:
    fail("K1 server-set metadata missing")
ok("K1 create sets uid, resourceVersion, creationTimestamp")
expect_api_error(lambda: v1.create_namespaced_config_map(NS, {"metadata": {"name": "c1"}}), 409,
                 "AlreadyExists", "G3 create of an existing name -> 409 AlreadyExists")
fresh = v1.read_namespaced_config_map("c1", NS)
fresh.data["a"] = "2"
upd = v1.replace_namespaced_config_map("c1", NS, fresh)
if int(upd.metadata.resource_version) <= int(cm.metadata.resource_version):
    fail("E1 resourceVersion did not grow")
ok("E1 update bumps the global resourceVersion")
stale = cm
stale.data = {"a": "3"}
b = expect_api_error(lambda: v1.replace_namespaced_config_map("c1", NS, stale), 409, "Conflict",
                     "G4 PUT with a stale resourceVersion -> 409 Conflict")
if "the object has been modified" not in b.get("message", ""):
    fail("G4 message: " + b.get("message", ""))
expect_api_error(lambda: v1.read_namespaced_config_map("nope", NS), 404, "NotFound",
                 "G2 GET of a missing object -> 404 NotFound")
expect_api_error(lambda: v1.create_namespaced_config_map("no-such-ns", {"metadata": {"name": "x"}}), 404,
                 "NotFound", "D5 write into a missing namespace -> 404")
p = v1.patch_namespaced_config_map("c1", NS, {"data": {"b": "x"}})
if p.data != {"a": "2", "b": "x"}:
    fail("merge/strategic patch through the client: %r" % p.data)
ok("H1 client patch merges data")
lease_api = client.CoordinationV1Api()
lease = lease_api.create_namespaced_lease(NS, {"metadata": {"name": "op"}, "spec": {
    "holderIdentity": "a", "leaseDurationSeconds": 15}})
lease.spec.holder_identity = "b"
lease_api.replace_namespaced_lease("op", NS, lease)
expect_api_error(lambda: lease_api.replace_namespaced_lease("op", NS, lease), 409, "Conflict",
                 "N2 lease takeover at a stale resourceVersion loses with 409")
v1.delete_namespaced_config_map("c1", NS)
expect_api_error(lambda: v1.read_namespaced_config_map("c1", NS), 404, "NotFound", "J2 deleted object is gone")

# ---- an informer loop that survives 410 by re-listing ----------------------------------------
state = {"relists": 0, "gone": 0, "seen": set(), "stop": False, "err": None}


def informer():
    try:
        while not state["stop"]:
            lst = v1.list_namespaced_config_map(NS)
            state["relists"] += 1
            for i in lst.items:
                state["seen"].add(i.metadata.name)
            w = watch.Watch()
            try:
                for ev in w.stream(v1.list_namespaced_config_map, NS,
                                   resource_version=lst.metadata.resource_version):
                    state["seen"].add(ev["object"].metadata.name)
                    if state["stop"]:
                        w.stop()
                        break
            except ApiException as e:
                if e.status == 410:
                    state["gone"] += 1
                    continue
                raise
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        state["err"] = repr(e)


t = threading.Thread(target=informer, daemon=True)
t.start()


def wait(cond, what, secs=15):
    end = time.time() + secs
    while time.time() < end:
        if state["err"]:
            fail("informer died: " + state["err"])
        if cond():
            return
        time.sleep(0.05)
    fail(what)


wait(lambda: state["relists"] == 1, "informer did not list")
time.sleep(0.3)
v1.create_namespaced_config_map(NS, {"metadata": {"name": "before"}})
wait(lambda: "before" in state["seen"], "watch did not deliver ADDED")
ok("F3 watch from the list's resourceVersion delivers ADDED")
admin("/kubesim/faults", {"watch410": 2})
admin("/kubesim/drop-watches")
wait(lambda: state["gone"] >= 1, "client did not see 410 Expired")
ok("F5 dropped watch resumed, got ERROR 410 twice, client raised 410")
wait(lambda: state["relists"] >= 2, "client did not re-list")
time.sleep(0.3)
v1.create_namespaced_config_map(NS, {"metadata": {"name": "after"}})
wait(lambda: "after" in state["seen"], "watch after re-list did not deliver ADDED")
ok("python3-kubernetes watch survives 410 by re-listing (relists=%d)" % state["relists"])
state["stop"] = True
v1.create_namespaced_config_map(NS, {"metadata": {"name": "stopper"}})
t.join(5)
print("all python client checks passed")
