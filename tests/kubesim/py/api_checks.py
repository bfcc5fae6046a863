#!/usr/bin/python3
"""Rule-by-rule checks of kubesim's API (docs/kube-api-double.md) over raw HTTP:
resourceVersion/409, paging + continue + 410, watch replay/bookmarks/410/selector transitions,
label and field selectors, finalizers, foreground/orphan deletion, generateName, status
subresource and generation, patches, fieldValidation, errors, scale, events, namespaces,
discovery. Needs KS_URL; kubesim started with KUBESIM_BOOKMARK_SECONDS=1 --no-kubelet."""
import json
import os
import re
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ksapi import (check, delete, fail, get, is_status, ok, patch, post, put, req, wait_for,  # noqa: E402
                   watch)

ROOT = os.environ.get("RM_ROOT", ".")
CRD = os.environ["KS_CRD"]
CM = "/api/v1/namespaces/default/configmaps"
TJ = "/apis/ringmaster.dev/v1alpha1/namespaces/default/trainingjobs"


def tj(name, **extra):
    o = {"apiVersion": "ringmaster.dev/v1alpha1", "kind": "TrainingJob",
         "metadata": {"name": name}, "spec": {"replicas": 2}}
    for k, v in extra.items():
        if k == "metadata":
            o["metadata"].update(v)
        else:
            o[k] = v
    return o


def cm(name, labels=None, **md):
    m = {"name": name}
    if labels:
        m["labels"] = labels
    m.update(md)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": {"k": "v"}}


# ---- CRD + discovery (B2, L1) -----------------------------------------------------------------
with open(CRD) as f:
    crd = yaml.safe_load(f)
# The API server writes a schema's default: values into every object (L2). ringmaster's own CRD
# declares none (a training runtime provides them: docs/trainingjob-api.md#runtimes), so this copy
# gains two, one of them nested, to check that kubesim applies them.
_spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
_spec["backend"]["default"] = "auto"
_spec["restartPolicy"]["properties"]["maxRestarts"]["default"] = 5
s, _, js = post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
check(s == 201, "L1 CRD created", js)
conds = {c["type"]: c["status"] for c in js["status"]["conditions"]}
check(conds.get("Established") == "True" and conds.get("NamesAccepted") == "True",
      "L1 Established and NamesAccepted at once", conds)
s, _, groups = get("/apis")
names = [g["name"] for g in groups["groups"]]
check("ringmaster.dev" in names and "coordination.k8s.io" in names and "events.k8s.io" in names
      and "apiextensions.k8s.io" in names, "B2 /apis lists built-in groups and the CRD group", names)
for g in groups["groups"]:
    for v in g["versions"]:
        s, _, _ = get("/apis/" + v["groupVersion"])
        if s != 200:
            fail("B2 /apis/%s answered %d" % (v["groupVersion"], s))
ok("B2 every listed group-version answers 200")
s, _, rl = get("/apis/ringmaster.dev/v1alpha1")
rn = [r["name"] for r in rl["resources"]]
check(rl["kind"] == "APIResourceList" and {"trainingjobs", "trainingjobs/status", "trainingjobs/scale"} <= set(rn),
      "B2 APIResourceList has the resource and its status/scale subresources", rn)
s, _, core = get("/api/v1")
check({"pods", "pods/status", "pods/log", "configmaps", "secrets", "services", "events", "namespaces"} <=
      {r["name"] for r in core["resources"]}, "B2 /api/v1 lists core kinds and pod subresources")
s, _, api = get("/api")
check(api["kind"] == "APIVersions" and api["versions"] == ["v1"], "B2 /api legacy APIVersions", api)
s, _, idx = get("/openapi/v3")
url = idx["paths"]["apis/ringmaster.dev/v1alpha1"]["serverRelativeURL"]
s, _, doc = get(url)
patch_ops = [p["patch"] for p in doc["paths"].values() if "patch" in p]
check(any(op["x-kubernetes-group-version-kind"]["kind"] == "TrainingJob" and
          any(pp["name"] == "fieldValidation" for pp in op["parameters"]) and
          list(op["requestBody"]["content"]) == ["application/merge-patch+json"] for op in patch_ops),
      "C3 OpenAPI v3 group doc: patch op with GVK, fieldValidation, merge-patch content")

# ---- create rules: K1, K2, L2, C4, G1 -----------------------------------------------------------
s, _, o = post(TJ, tj("a", spec={"replicas": 2, "restartPolicy": {}}))
check(s == 201 and o["metadata"]["generation"] == 1 and o["metadata"]["uid"] and
      re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", o["metadata"]["creationTimestamp"]),
      "K1/I2 server sets uid, creationTimestamp (RFC 3339), generation=1", o.get("metadata"))
check(o["spec"].get("backend") == "auto" and o["spec"]["restartPolicy"].get("maxRestarts") == 5,
      "L2 defaults applied, nested too", o["spec"])
s, _, o = post(TJ, tj("gen-x", metadata={"name": None, "generateName": "job-"}))
check(s == 201 and re.match(r"^job-[bcdfghjklmnpqrstvwxz2456789]{5}$", o["metadata"]["name"]),
      "K2 generateName: prefix + 5 chars of the apiserver alphabet", o.get("metadata"))
s, hdr, o = post(TJ + "?fieldValidation=Strict", tj("strict", spec={"replicas": 1, "bogus": 1}))
check(s == 400 and is_status(o, 400) and 'unknown field "spec.bogus"' in o["message"] and
      o["message"].startswith("strict decoding error"), "C4 Strict: unknown field -> 400 strict decoding error", o)
s, hdr, o = post(TJ + "?fieldValidation=Warn", tj("warn", spec={"replicas": 1, "bogus": 1}))
warn = [v for k, v in hdr if k.lower() == "warning"]
check(s == 201 and "bogus" not in o["spec"] and warn and 'unknown field \\"spec.bogus\\"' in warn[0],
      "C4 Warn: pruned + Warning: 299 header", (s, warn))
s, hdr, o = post(TJ + "?fieldValidation=Ignore", tj("ign", spec={"replicas": 1, "bogus": 1}))
check(s == 201 and "bogus" not in o["spec"] and not [v for k, v in hdr if k.lower() == "warning"],
      "C4/L2 Ignore: pruned silently")
s, _, o = req("POST", TJ + "?fieldValidation=Strict",
              b'{"apiVersion":"ringmaster.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":"dup"},"spec":{"replicas":1,"replicas":2}}')
check(s == 400 and "duplicate field" in o["message"], "C4 Strict: duplicate field -> 400", o)
s, _, o = post(TJ, tj("badtype", spec={"replicas": "two"}))
check(s == 422 and is_status(o, 422) and o["details"]["causes"][0]["field"] == "spec.replicas",
      "G5 schema type error -> 422 Invalid with causes[].field", o)
s, _, o = post(TJ, tj("a"))
check(s == 409 and o["reason"] == "AlreadyExists" and o["details"]["name"] == "a" and
      o["details"]["group"] == "ringmaster.dev" and o["details"]["kind"] == "trainingjobs",
      "G1/G3 409 AlreadyExists Status with details", o)
s, _, o = post(TJ, tj("BadName"))
check(s == 422 and is_status(o, 422), "422 for an invalid name", o)

# ---- object-name and metadata rules, in the API server's words (G5; names.c) -------------------
SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
             "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
         "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
         "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
DNS1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
           "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
           "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


def invalid(s, o, kind, name, causes, what):
    """422, reason Invalid, details.causes exactly `causes` [(type, field, message)], and the message
    `<kind> "<name>" is invalid: <field>: <message>` (several: in brackets)."""
    got = [(c["type"], c["field"], c["message"]) for c in o.get("details", {}).get("causes", [])]
    body = ", ".join("%s: %s" % (f, m) for _, f, m in causes)
    msg = '%s "%s" is invalid: %s' % (kind, name, body if len(causes) == 1 else "[" + body + "]")
    check(s == 422 and is_status(o, 422) and o["reason"] == "Invalid" and got == causes and o["message"] == msg,
          what, (s, o, msg))


SVC = "/api/v1/namespaces/default/services"
POD = "/api/v1/namespaces/default/pods"


def svc(name):
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}


def pod(name, **spec):
    sp = {"containers": [{"name": "c", "image": "busybox"}]}
    sp.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": sp}


for n in ["1job", "a.b"]:
    s, _, o = post(SVC, svc(n))
    invalid(s, o, "Service", n, [("FieldValueInvalid", "metadata.name", 'Invalid value: "%s": %s' % (n, DNS1035))],
            "Service name %s: not a DNS-1035 label -> 422" % n)
s, _, o = post(SVC, svc("x" * 64))
invalid(s, o, "Service", "x" * 64,
        [("FieldValueInvalid", "metadata.name", 'Invalid value: "%s": must be no more than 63 characters' % ("x" * 64))],
        "Service name of 64 characters -> 422")
check(post(SVC, svc("job-1"))[0] == 201, "a DNS-1035 Service name is accepted")
s, _, o = post(TJ, tj("a_b"))
invalid(s, o, "TrainingJob.ringmaster.dev", "a_b",
        [("FieldValueInvalid", "metadata.name", 'Invalid value: "a_b": %s' % SUBDOMAIN)],
        "CR name not a DNS-1123 subdomain -> 422 (qualified kind)")
# the CRD restricts its own names further (metadata.name: a DNS-1035 label of at most 54 characters)
s, _, o = post(TJ, tj("a.b"))
check(s == 422 and o["message"] == 'TrainingJob.ringmaster.dev "a.b" is invalid: metadata.name: Invalid value: '
      '"a.b": metadata.name in body should match \'^[a-z]([-a-z0-9]*[a-z0-9])?$\'' and
      o["details"]["causes"][0]["field"] == "metadata.name", "CRD metadata.name pattern -> 422", o)
s, _, o = post(TJ, tj("j" * 55))
check(s == 422 and o["message"].endswith("metadata.name: Too long: may not be more than 54 bytes"),
      "CRD metadata.name maxLength -> 422", o)
check(post(TJ, tj("j" * 54))[0] == 201, "a 54-character job name is accepted")
s, _, o = post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}})
invalid(s, o, "Namespace", "a.b", [("FieldValueInvalid", "metadata.name", 'Invalid value: "a.b": %s' % LABEL)],
        "Namespace name must be a DNS-1123 label -> 422")
s, _, o = post("/apis/rbac.authorization.k8s.io/v1/clusterroles",
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "system:Kube-Thing"}, "rules": []})
check(s == 201, "RBAC names are path segments (colons and capitals allowed)", o)
s, _, o = post("/apis/rbac.authorization.k8s.io/v1/clusterroles",
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "a%b"}, "rules": []})
invalid(s, o, "ClusterRole.rbac.authorization.k8s.io", "a%b",
        [("FieldValueInvalid", "metadata.name", "Invalid value: \"a%b\": may not contain '%'")],
        "RBAC name with '%' -> 422")
# pods: a 69-character hostname (the probe's 60-character job name) and a dotted subdomain
host = "j" * 60 + "-worker-0"
s, _, o = post(POD, pod("p1", hostname=host, subdomain="a.b"))
invalid(s, o, "Pod", "p1",
        [("FieldValueInvalid", "spec.hostname", 'Invalid value: "%s": must be no more than 63 characters' % host),
         ("FieldValueInvalid", "spec.subdomain", 'Invalid value: "a.b": %s' % LABEL)],
        "pod spec.hostname over 63 characters and a dotted spec.subdomain -> 422 with both causes")
s, _, o = post(POD, pod("p2", hostname="job-worker-0", subdomain="job"))
check(s == 201, "valid pod hostname/subdomain accepted", o)
s, _, o = patch(POD + "/p2", {"spec": {"hostname": "Bad_Host"}}, "application/merge-patch+json")
invalid(s, o, "Pod", "p2", [("FieldValueInvalid", "spec.hostname", 'Invalid value: "Bad_Host": %s' % LABEL)],
        "a patch that makes the hostname invalid -> 422")
# annotations: at most 256 KiB of keys + values in total, on create and on update
big = {"a": "x" * (256 * 1024 - 1)}
check(post(CM, cm("ann-ok", annotations=big))[0] == 201, "annotations of exactly 256 KiB accepted")
s, _, o = post(CM, cm("ann-big", annotations={"a": "x" * (1024 * 1024)}))
invalid(s, o, "ConfigMap", "ann-big",
        [("FieldValueTooLong", "metadata.annotations", "Too long: may not be more than 262144 bytes")],
        "1 MiB of annotations -> 422 Too long")
s, _, o = patch(CM + "/ann-ok", {"metadata": {"annotations": {"b": "y"}}}, "application/merge-patch+json")
invalid(s, o, "ConfigMap", "ann-ok",
        [("FieldValueTooLong", "metadata.annotations", "Too long: may not be more than 262144 bytes")],
        "a patch that pushes annotations over 256 KiB -> 422")
for path in [POD + "/p2", CM + "/ann-ok", SVC + "/job-1", TJ + "/" + "j" * 54,
             "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:Kube-Thing"]:
    check(delete(path)[0] == 200, "cleanup " + path)
check(get(POD + "/p2")[0] == 404, "the unscheduled pod is gone at once")
s, _, o = req("POST", CM, b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":')
check(s == 400 and is_status(o, 400), "G1 malformed JSON -> 400 Status", o)
s, _, o = get("/apis/ringmaster.dev/v1alpha1/namespaces/default/nosuchthings")
check(s == 404 and is_status(o, 404), "G1 unknown resource -> 404 Status", o)
s, _, o = req("POST", CM, b"{" + b'"a":"' + b"x" * (4 * 1024 * 1024) + b'"}')
check(s == 413 and is_status(o, 413), "body over 3 MiB -> 413 Status", s)
s, _, o = post(CM, {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "v"}})
check(s == 400 and is_status(o, 400), "apiVersion mismatch -> 400", o)
s, _, o = post(TJ, tj("withrv", metadata={"resourceVersion": "5"}))
check(s >= 400 and is_status(o, s), "K1 create carrying resourceVersion is rejected", o)

# ---- resourceVersion and 409 on PUT (E1, G4) ---------------------------------------------------
s, _, a = get(TJ + "/a")
old = json.loads(json.dumps(a))
a["spec"]["replicas"] = 3
s, _, a2 = put(TJ + "/a", a)
check(s == 200 and int(a2["metadata"]["resourceVersion"]) > int(old["metadata"]["resourceVersion"]) and
      a2["metadata"]["generation"] == 2, "E1/I2 PUT bumps resourceVersion and generation", a2.get("metadata"))
old["spec"]["replicas"] = 4
s, _, o = put(TJ + "/a", old)
check(s == 409 and o["reason"] == "Conflict" and "the object has been modified" in o["message"],
      "G4 PUT with a stale resourceVersion -> 409 Conflict", o)
del a2["metadata"]["resourceVersion"]
s, _, o = put(TJ + "/a", a2)
check(s == 422 and "must be specified for an update" in o["message"], "G4 CR PUT without resourceVersion -> 422", o)
s, _, c = post(CM, cm("plain"))
c["data"] = {"k": "w"}
del c["metadata"]["resourceVersion"]
s, _, c2 = put(CM + "/plain", c)
check(s == 200 and c2["data"]["k"] == "w", "G4 built-in PUT without resourceVersion is unconditional", c2)
s, _, a3 = get(TJ + "/a")
s, _, a4 = put(TJ + "/a", a3)
check(a4["metadata"]["resourceVersion"] == a3["metadata"]["resourceVersion"],
      "a PUT that changes nothing does not bump resourceVersion")

# ---- status subresource and generation (I1, I2) --------------------------------------------------
s, _, o = post(TJ, tj("st", status={"phase": "Hacked"}))
check("status" not in o or "phase" not in o.get("status", {}), "I1 create drops .status", o.get("status"))
s, _, o = patch(TJ + "/st/status", {"status": {"phase": "Running"}, "spec": {"replicas": 9}})
check(s == 200 and o["status"]["phase"] == "Running" and o["spec"]["replicas"] == 2 and
      o["metadata"]["generation"] == 1, "I1/I2 /status write changes only status, no generation bump", o)
s, _, o = patch(TJ + "/st", {"status": {"phase": "Nope"}, "spec": {"replicas": 5}})
check(o["status"]["phase"] == "Running" and o["spec"]["replicas"] == 5 and o["metadata"]["generation"] == 2,
      "I1/I2 main-resource write keeps status, bumps generation on spec change", o)
s, _, o = patch(TJ + "/st", {"metadata": {"labels": {"x": "y"}}})
check(o["metadata"]["generation"] == 2, "I2 metadata-only change does not bump generation")
s, _, o = patch(TJ + "/st", {"metadata": {"generation": 77}})
check(o["metadata"]["generation"] == 2, "I2 clients cannot set generation")
s, _, sc = get(TJ + "/st/scale")
check(s == 200 and sc["kind"] == "Scale" and sc["apiVersion"] == "autoscaling/v1" and sc["spec"]["replicas"] == 5,
      "L5 GET /scale", sc)
stale_sc = json.loads(json.dumps(sc))
sc["spec"]["replicas"] = 6
s, _, sc2 = put(TJ + "/st/scale", sc)
check(s == 200 and sc2["spec"]["replicas"] == 6 and get(TJ + "/st")[2]["spec"]["replicas"] == 6,
      "L5 PUT /scale writes specReplicasPath")
s, _, o = put(TJ + "/st/scale", stale_sc)
check(s == 409, "L5 PUT /scale with a stale resourceVersion -> 409", o)
# the CRD's maximum (the rendezvous' world limit) holds on every path that writes replicas
TOO_MANY = ('TrainingJob.ringmaster.dev "st" is invalid: spec.replicas: Invalid value: 20000: '
            'spec.replicas in body should be less than or equal to 16384')
s, _, o = patch(TJ + "/st/scale", {"spec": {"replicas": 20000}})
check(s == 422 and is_status(o, 422) and o["message"] == TOO_MANY and
      o["details"]["causes"][0]["field"] == "spec.replicas", "L5 PATCH /scale over the CRD maximum -> 422", o)
s, _, o = put(TJ + "/st/scale", dict(sc2, spec={"replicas": 20000}))
check(s == 422 and o["message"] == TOO_MANY, "L5 PUT /scale over the CRD maximum -> 422", o)
s, _, o = patch(TJ + "/st", {"spec": {"replicas": 20000}})
check(s == 422 and o["message"] == TOO_MANY, "a merge patch over the CRD maximum -> 422", o)
check(get(TJ + "/st")[2]["spec"]["replicas"] == 6, "refused scales leave spec.replicas alone")
s, _, o = patch(TJ + "/st/scale", {"spec": {"replicas": 16384}})
check(s == 200 and o["spec"]["replicas"] == 16384, "L5 scale to the maximum itself is accepted", o)
patch(TJ + "/st/scale", {"spec": {"replicas": 6}})
s, _, o = get("/api/v1/namespaces/default/configmaps/plain/scale")
check(s == 404 and is_status(o, 404), "D4 undeclared subresource -> 404")

# ---- patches (H1, G5) --------------------------------------------------------------------------
s, _, o = patch(TJ + "/a", [{"op": "test", "path": "/spec/replicas", "value": 3},
                             {"op": "replace", "path": "/spec/replicas", "value": 7},
                             {"op": "add", "path": "/metadata/labels", "value": {"p": "q"}}],
                ctype="application/json-patch+json")
check(s == 200 and o["spec"]["replicas"] == 7 and o["metadata"]["labels"] == {"p": "q"},
      "H1 JSON patch (test, replace, add)", o)
s, _, o = patch(TJ + "/a", [{"op": "test", "path": "/spec/replicas", "value": 1}], ctype="application/json-patch+json")
check(s == 422 and is_status(o, 422), "H1 JSON patch failed test op -> 422", o)
s, _, o = patch(TJ + "/a", [{"op": "remove", "path": "/metadata/labels/p"}, {"op": "move", "from": "/spec/replicas",
                                                                              "path": "/spec/minReplicas"}],
                ctype="application/json-patch+json")
check(s == 200 and o["spec"].get("minReplicas") == 7 and "p" not in (o["metadata"].get("labels") or {}),
      "H1 JSON patch remove + move", o.get("spec"))
s, _, o = patch(TJ + "/a", {"spec": {"minReplicas": None, "replicas": 2}})
check(s == 200 and "minReplicas" not in o["spec"] and o["spec"]["replicas"] == 2, "H1 merge patch: null deletes", o)
s, _, o = patch(TJ + "/a", {"spec": {"replicas": 3}}, ctype="application/strategic-merge-patch+json")
check(s == 415 and is_status(o, 415), "H1 strategic merge on a CR -> 415", o)
s, _, o = patch(TJ + "/a", "spec:\n  replicas: 3\n", ctype="application/apply-patch+yaml")
check(s == 415 and is_status(o, 415), "H3 server-side apply -> 415 (documented)", o)
s, _, o = patch(TJ + "/a", {"spec": {}}, ctype="text/plain")
check(s == 415, "G5 unknown patch media type -> 415", o)
s, _, o = patch(TJ + "/a", {"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 4}})
check(s == 409, "G4 a patch that sets a stale resourceVersion -> 409", o)
s, _, o = req("PATCH", TJ + "/a", b"[{", ctype="application/json-patch+json")
check(s == 400 and is_status(o, 400), "malformed patch -> 400", o)
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smp"},
       "spec": {"containers": [{"name": "a", "image": "busybox", "env": [{"name": "X", "value": "1"}]},
                               {"name": "b", "image": "busybox"}]}}
s, _, o = post("/api/v1/namespaces/default/pods", pod)
s, _, o = patch("/api/v1/namespaces/default/pods/smp",
                {"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}]}},
                ctype="application/strategic-merge-patch+json")
cs = {c["name"]: c for c in o["spec"]["containers"]}
check(s == 200 and set(cs) == {"a", "b"} and [e["name"] for e in cs["a"]["env"]] == ["X", "Y"] and
      cs["a"]["image"] == "busybox", "H1 strategic merge on a pod merges containers and env by name", o.get("spec"))

# ---- paging (E3, E4, E5) ------------------------------------------------------------------------
for i in range(7):
    post(CM, cm("page-%d" % i, {"set": "page"}))
s, _, p1 = get(CM + "?labelSelector=set%3Dpage&limit=3")
tok = p1["metadata"].get("continue")
check(len(p1["items"]) == 3 and tok and p1["metadata"]["remainingItemCount"] == 4,
      "E5 limit=3 -> 3 items + continue + remainingItemCount", p1["metadata"])
post(CM, cm("page-00", {"set": "page"}))   # created between pages: not in the snapshot
s, _, p2 = get(CM + "?labelSelector=set%3Dpage&limit=3&continue=" + tok)
s, _, p3 = get(CM + "?labelSelector=set%3Dpage&limit=3&continue=" + p2["metadata"]["continue"])
names = [i["metadata"]["name"] for i in p1["items"] + p2["items"] + p3["items"]]
check(names == ["page-%d" % i for i in range(7)] and not p3["metadata"].get("continue") and
      p2["metadata"]["resourceVersion"] == p1["metadata"]["resourceVersion"],
      "E5 continue pages the same snapshot (sorted, complete, no later writes)", names)
post("/kubesim/faults", {"expireContinue": True})
s, _, o = get(CM + "?limit=3&continue=" + tok)
check(s == 410 and o["reason"] == "Expired" and is_status(o, 410), "E5 expired continue token -> 410 Expired", o)
s, _, o = get(CM + "?limit=3&continue=garbage")
check(s == 400 and is_status(o, 400), "E5 malformed continue token -> 400", o)
s, _, o = get(CM + "?resourceVersionMatch=Exact")
check(s == 422, "E3 resourceVersionMatch without resourceVersion -> 422", o)
s, _, o = get(CM + "?resourceVersionMatch=Exact&resourceVersion=0")
check(s == 422, "E3 Exact with 0 -> 422", o)
s, _, o = get(CM + "?resourceVersionMatch=NotOlderThan&resourceVersion=1&continue=" + tok)
check(s == 422, "E3 resourceVersionMatch with continue -> 422", o)
s, _, o = get(CM + "?sendInitialEvents=true")
check(s == 422, "E3 sendInitialEvents without watch -> 422", o)
s, _, lst = get(CM)
rv = lst["metadata"]["resourceVersion"]
s, _, o = get(CM + "?resourceVersionMatch=Exact&resourceVersion=" + rv)
check(s == 200, "E3 Exact at the current rv -> 200")
s, _, o = get(CM + "?resourceVersionMatch=Exact&resourceVersion=3")
check(s == 410 and o["reason"] == "Expired", "E3 Exact at an old rv -> 410 Expired", o)
s, _, o = get(CM + "?resourceVersion=abc")
check(s == 400, "invalid resourceVersion -> 400")
s, _, lst2 = get("/apis/ringmaster.dev/v1alpha1/trainingjobs")
check(lst2["kind"] == "TrainingJobList" and lst2["apiVersion"] == "ringmaster.dev/v1alpha1" and
      all(i["kind"] == "TrainingJob" and i["apiVersion"] == "ringmaster.dev/v1alpha1" for i in lst2["items"]),
      "D1/D3 all-namespaces CR list with kind/apiVersion on every item")

# ---- label selectors (K4) -----------------------------------------------------------------------
for n, l in (("l1", {"env": "prod", "tier": "web"}), ("l2", {"env": "dev"}), ("l3", {"tier": "db"}), ("l4", {"grp": "sel"})):
    l = dict(l, grp="sel")
    post(CM, cm(n, l))


def sel(q):
    s, _, o = get(CM + "?labelSelector=" + q.replace(" ", "%20").replace("=", "%3D").replace("!", "%21")
                  .replace(",", "%2C").replace("(", "%28").replace(")", "%29"))
    return s, sorted(i["metadata"]["name"] for i in o["items"]) if s == 200 else o


cases = [("grp=sel,env=prod", ["l1"]), ("grp=sel,env==prod", ["l1"]), ("grp=sel,env!=prod", ["l2", "l3", "l4"]),
         ("grp=sel,env in (prod,dev)", ["l1", "l2"]), ("grp=sel,env notin (prod)", ["l2", "l3", "l4"]),
         ("grp=sel,env", ["l1", "l2"]), ("grp=sel,!env", ["l3", "l4"]), ("grp=sel,env=prod,tier=web", ["l1"]),
         ("grp=sel,tier in (web, db)", ["l1", "l3"])]
for q, want in cases:
    s, got = sel(q)
    if got != want:
        fail("K4 selector %r: got %r want %r" % (q, got, want))
ok("K4 label selector forms: = == != in notin exists !exists AND (!= and notin match missing keys)")
for bad in ("env in prod", "=x", "a b", "env in (a", "env,,x", "env=a=b"):
    s, o = sel(bad)
    if s != 400 or not is_status(o, 400):
        fail("K4 bad selector %r -> %s" % (bad, s))
ok("K4 malformed label selectors -> 400 Status")

# ---- field selectors (K5) -----------------------------------------------------------------------
s, _, o = get(CM + "?fieldSelector=metadata.name%3Dl2")
check([i["metadata"]["name"] for i in o["items"]] == ["l2"], "K5 fieldSelector metadata.name=")
s, _, o = get(CM + "?labelSelector=grp%3Dsel&fieldSelector=metadata.name%21%3Dl2")
check(sorted(i["metadata"]["name"] for i in o["items"]) == ["l1", "l3", "l4"], "K5 fieldSelector !=")
s, _, o = get(CM + "?fieldSelector=metadata.namespace%3D%3Ddefault,metadata.name%3D%3Dl1")
check([i["metadata"]["name"] for i in o["items"]] == ["l1"], "K5 fieldSelector == with AND")
s, _, o = get(TJ + "?fieldSelector=spec.replicas%3D1")
check(s == 400 and "field label not supported: spec.replicas" in o["message"], "K5 unsupported CR field -> 400", o)
s, _, o = get("/api/v1/namespaces/default/pods?fieldSelector=status.phase%3DPending")
check(s == 200 and [i["metadata"]["name"] for i in o["items"]] == ["smp"], "K5 pods: status.phase")

# ---- events in both APIs (P1, P2) ----------------------------------------------------------------
s, _, ev = post("/api/v1/namespaces/default/events", {
    "apiVersion": "v1", "kind": "Event", "metadata": {"name": "a.1"}, "reason": "Started", "type": "Normal",
    "message": "hi", "involvedObject": {"kind": "TrainingJob", "name": "a", "namespace": "default", "uid": "u1"},
    "source": {"component": "ringmaster"}})
s, _, nev = get("/apis/events.k8s.io/v1/namespaces/default/events/a.1")
check(s == 200 and nev["regarding"]["name"] == "a" and nev["note"] == "hi" and nev["apiVersion"] == "events.k8s.io/v1",
      "P2 core Event read through events.k8s.io/v1 (regarding, note)", nev)
s, _, o = get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Da,involvedObject.kind%3DTrainingJob,involvedObject.uid%3Du1")
check(len(o["items"]) == 1, "P2 involvedObject field selectors")

# ---- watch (F1-F8) ------------------------------------------------------------------------------
s, _, lst = get(CM)
rv0 = lst["metadata"]["resourceVersion"]
post(CM, cm("w1"))
patch(CM + "/w1", {"data": {"k": "2"}})
delete(CM + "/w1")
t0 = time.time()
s, evs, closed = watch(CM + "?watch=true&resourceVersion=%s&timeoutSeconds=2" % rv0, 6)
types = [(e["type"], e["object"]["metadata"]["name"]) for e in evs]
check(types == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")], "F3 watch from rv replays the log", types)
rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
check(rvs == sorted(rvs) and rvs[2] > rvs[1], "F4 DELETED carries the deletion's resourceVersion", rvs)
check(closed and time.time() - t0 < 9, "F6 timeoutSeconds ends the stream", time.time() - t0)
s, evs, _ = watch(CM + "?watch=1&labelSelector=grp%3Dsel&timeoutSeconds=1", 4)
check(sorted(e["object"]["metadata"]["name"] for e in evs if e["type"] == "ADDED") == ["l1", "l2", "l3", "l4"],
      "F3 watch without rv: synthetic ADDED for every match")
s, evs, _ = watch(CM + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion=" + rv0, 5)
bm = [e for e in evs if e["type"] == "BOOKMARK"]
check(bm and bm[0]["object"]["kind"] == "ConfigMap" and int(bm[0]["object"]["metadata"]["resourceVersion"]) >= int(rv0),
      "F7 allowWatchBookmarks -> BOOKMARK with kind and resourceVersion", bm)
s, evs, _ = watch(CM + "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
                  "&labelSelector=grp%3Dsel&timeoutSeconds=1", 4)
check([e["type"] for e in evs][:5] == ["ADDED"] * 4 + ["BOOKMARK"] and
      evs[4]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true",
      "F8 sendInitialEvents: ADDEDs then the initial-events-end BOOKMARK", [e["type"] for e in evs])
s, evs, _ = watch(CM + "?watch=true&labelSelector=in%20valid", 2)
check(s == 400 and is_status(evs[0], 400), "F5 a bad selector is a plain HTTP 400 before streaming")
# selector transitions (F4)
s, _, lst = get(CM)
rvt = lst["metadata"]["resourceVersion"]
post(CM, cm("tr", {"x": "1"}))
patch(CM + "/tr", {"metadata": {"labels": {"x": "2"}}})
patch(CM + "/tr", {"metadata": {"labels": {"x": "1"}}})
s, evs, _ = watch(CM + "?watch=true&labelSelector=x%3D1&timeoutSeconds=1&resourceVersion=" + rvt, 4)
check([e["type"] for e in evs] == ["ADDED", "DELETED", "ADDED"], "F4 stops matching -> DELETED, starts -> ADDED",
      [e["type"] for e in evs])
# 410 when the rv fell out of the window (10,000 events)
body = json.dumps(cm("churn")).encode()
post(CM, cm("churn"))
import http.client  # noqa: E402
from ksapi import HOST, PORT  # noqa: E402
c = http.client.HTTPConnection(HOST, PORT, timeout=30)
for i in range(10001):
    c.request("PATCH", CM + "/churn", body=json.dumps({"data": {"i": str(i)}}),
              headers={"Content-Type": "application/merge-patch+json"})
    r = c.getresponse()
    r.read()
c.close()
s, evs, closed = watch(CM + "?watch=true&resourceVersion=" + rv0, 5)
check(s == 200 and len(evs) == 1 and evs[0]["type"] == "ERROR" and evs[0]["object"]["code"] == 410 and
      evs[0]["object"]["reason"] == "Expired" and "too old resource version" in evs[0]["object"]["message"] and closed,
      "F5 watch from an rv older than the window: 200, one ERROR 410 Expired, close", evs[:2])

# ---- finalizers (J3) ----------------------------------------------------------------------------
s, _, f = post(TJ, tj("fin", metadata={"finalizers": ["ringmaster.dev/cleanup"]}))
s, _, o = delete(TJ + "/fin", {"propagationPolicy": "Background"})
check(s == 200 and o["metadata"].get("deletionTimestamp") and o["metadata"]["generation"] == 2,
      "J3 delete with finalizers: deletionTimestamp set, generation +1, object returned", o.get("metadata"))
s, _, o = get(TJ + "/fin")
check(s == 200, "J3 object stays while finalizers remain")
s, _, o = patch(TJ + "/fin", {"metadata": {"finalizers": ["ringmaster.dev/cleanup", "x/new"]}})
check(s == 422 and "no new finalizers" in o["message"], "J3 adding a finalizer while deleting -> 422", o)
rvf = o and get(TJ + "/fin")[2]["metadata"]["resourceVersion"]
s, _, o = patch(TJ + "/fin", {"metadata": {"finalizers": None}})
s2, _, o2 = get(TJ + "/fin")
check(s == 200 and s2 == 404, "J3 the write that empties finalizers deletes the object", (s, s2))
s, evs, _ = watch(TJ + "?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dfin&resourceVersion=" + rvf, 3)
check([e["type"] for e in evs] == ["DELETED"], "J3 DELETED emitted", [e["type"] for e in evs])
s, _, o = delete(TJ + "/a", {"preconditions": {"uid": "wrong"}})
check(s == 409, "J1 preconditions.uid mismatch -> 409", o)
s, _, o = delete(TJ + "/ign")
check(s == 200 and o["kind"] == "Status" and o["status"] == "Success" and o["details"]["name"] == "ign",
      "J2 CR delete without finalizers answers Success Status", o)

# ---- garbage collection: foreground and orphan (J4, J5) ----------------------------------------
s, _, own = post(TJ, tj("owner"))
ref = {"apiVersion": "ringmaster.dev/v1alpha1", "kind": "TrainingJob", "name": "owner",
       "uid": own["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
post(CM, cm("dep1", ownerReferences=[ref]))
post(CM, cm("dep2", ownerReferences=[ref], finalizers=["test/hold"]))
s, _, o = post(CM, cm("dep3", ownerReferences=[ref, dict(ref, name="other", uid="u2")]))
check(s == 422, "J5 two controller ownerReferences -> 422", o)
s, _, o = delete(TJ + "/owner", {"propagationPolicy": "Foreground"})
check(s == 200 and "foregroundDeletion" in o["metadata"]["finalizers"] and o["metadata"]["deletionTimestamp"],
      "J4 Foreground: owner gets foregroundDeletion + deletionTimestamp", o.get("metadata"))
wait_for(lambda: get(CM + "/dep1")[0] == 404, "J4 foreground: dependent deleted")
time.sleep(0.5)
check(get(TJ + "/owner")[0] == 200 and get(CM + "/dep2")[2]["metadata"].get("deletionTimestamp"),
      "J4 Foreground: owner waits while a blocking dependent remains")
patch(CM + "/dep2", {"metadata": {"finalizers": None}})
wait_for(lambda: get(TJ + "/owner")[0] == 404, "J4 foreground: owner deleted after its dependents")
ok("J4 Foreground: owner removed once dependents are gone")
s, _, own3 = post(TJ, tj("owner3"))
nb = {"apiVersion": "ringmaster.dev/v1alpha1", "kind": "TrainingJob", "name": "owner3", "uid": own3["metadata"]["uid"]}
post(CM, cm("nonblock", ownerReferences=[nb], finalizers=["test/hold"]))
delete(TJ + "/owner3", {"propagationPolicy": "Foreground"})
wait_for(lambda: get(TJ + "/owner3")[0] == 404, "J4 foreground owner held by a non-blocking dependent")
check(get(CM + "/nonblock")[2]["metadata"].get("deletionTimestamp"),
      "J4 Foreground: only blockOwnerDeletion dependents hold the owner (non-blocking one still deleting)")
patch(CM + "/nonblock", {"metadata": {"finalizers": None}})
post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
s, _, own4 = post(TJ, tj("owner4"))
s, _, o = post("/api/v1/namespaces/other/configmaps",
               cm("xns", ownerReferences=[dict(nb, name="owner4", uid=own4["metadata"]["uid"])]))
wait_for(lambda: get("/api/v1/namespaces/other/configmaps/xns")[0] == 404,
         "J5 an owner in another namespace does not count: dependent collected")
ok("J5 ownerReferences resolve in the dependent's namespace only")
s, _, own2 = post(TJ, tj("owner2"))
post(CM, cm("orph", ownerReferences=[dict(ref, name="owner2", uid=own2["metadata"]["uid"])]))
s, _, o = delete(TJ + "/owner2?propagationPolicy=Orphan")
time.sleep(0.5)
s, _, o = get(CM + "/orph")
check(s == 200 and not o["metadata"].get("ownerReferences"), "J4 Orphan: dependent kept, ownerReferences stripped", o)

# ---- namespaces (D5) ----------------------------------------------------------------------------
s, _, o = post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tmp"}})
check(s == 201 and o["status"]["phase"] == "Active", "D5 namespace created Active")
post("/api/v1/namespaces/tmp/configmaps", cm("inner"))
s, _, o = delete("/api/v1/namespaces/tmp")
check(get("/api/v1/namespaces/tmp/configmaps/inner")[0] == 404 and get("/api/v1/namespaces/tmp")[0] == 404,
      "namespace deletion removes its contents")
s, _, o = delete("/api/v1/namespaces/default")
check(s == 403, "default namespace may not be deleted", o)

# ---- CRD deletion ------------------------------------------------------------------------------
s, _, o = delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainingjobs.ringmaster.dev")
check(s == 200, "CRD deleted")
check(get(TJ)[0] == 404 and "ringmaster.dev" not in [g["name"] for g in get("/apis")[2]["groups"]],
      "L1 deleting the CRD stops serving its resource and drops the group from discovery")
print("all API checks passed")
