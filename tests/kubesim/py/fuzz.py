#!/usr/bin/python3
"""Fuzz kubesim: random methods, paths, query strings, content types and bodies (random JSON,
truncated JSON, bytes, huge). Every answer must be an HTTP status with, for errors, a JSON
Status whose code equals the HTTP status; the server must stay up. Seeded (FUZZ_SEED) and
bounded (FUZZ_N requests)."""
import http.client
import json
import os
import random
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ksapi import HOST, PORT, fail, ok  # noqa: E402

seed = int(os.environ.get("FUZZ_SEED", "1"))
N = int(os.environ.get("FUZZ_N", "3000"))
rnd = random.Random(seed)

SEGS = ["api", "apis", "v1", "v1alpha1", "ringmaster.dev", "namespaces", "default", "kube-system", "nope",
        "pods", "configmaps", "secrets", "services", "events", "leases", "coordination.k8s.io", "events.k8s.io",
        "apiextensions.k8s.io", "customresourcedefinitions", "trainingjobs", "status", "scale", "log", "x",
        "a", "..", ".", "", "%00", "%2F", "\u00e9", "~", "*", "a" * 300, "version", "openapi", "v3", "kubesim",
        "requests", "nodes", "kubesim-node", "binding", "finalize"]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "FOO", "GET", "POST", "PATCH"]
CTYPES = ["application/json", "application/merge-patch+json", "application/json-patch+json",
          "application/strategic-merge-patch+json", "application/apply-patch+yaml", "text/plain", "", "x/y;z",
          "application/json; charset=utf-8"]
QKEYS = ["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "resourceVersionMatch",
         "watch", "timeoutSeconds", "allowWatchBookmarks", "fieldValidation", "propagationPolicy", "dryRun",
         "gracePeriodSeconds", "sendInitialEvents", "container", "tailLines", "follow", "previous"]
QVALS = ["", "0", "1", "-1", "true", "false", "a=b", "a in (b,c)", "!x", "a!=", "((", "metadata.name=x",
         "spec.foo=1", "Strict", "Warn", "Exact", "NotOlderThan", "ks1.1.0", "ks1.999.5", "%", "999999999999999999999",
         "a,b,,", "x" * 2000, "Foreground", "Orphan", "All"]


def rand_json(depth=0):
    t = rnd.randint(0, 7 if depth < 4 else 4)
    if t == 0:
        return rnd.choice([None, True, False])
    if t == 1:
        return rnd.choice([0, -1, 3.5, 1e300, 2 ** 63, rnd.randint(-10, 10)])
    if t == 2:
        return rnd.choice(["", "x", "default", "a" * 100, "\u2603", "null", "/metadata/name"])
    if t in (3, 4):
        return [rand_json(depth + 1) for _ in range(rnd.randint(0, 3))]
    keys = ["apiVersion", "kind", "metadata", "spec", "status", "name", "namespace", "labels", "finalizers",
            "op", "path", "value", "from", "data", "replicas", "resourceVersion", "generateName", "containers",
            "ownerReferences", "uid", "propagationPolicy", "preconditions", "$patch", "$setElementOrder/containers"]
    return {rnd.choice(keys): rand_json(depth + 1) for _ in range(rnd.randint(0, 5))}


def rand_body():
    t = rnd.randint(0, 9)
    if t == 0:
        return b""
    if t == 1:
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 200)))
    if t == 2:
        s = json.dumps(rand_json()).encode()
        return s[:rnd.randint(0, len(s))]
    if t == 3:
        return b"[" * 5000
    if t == 4:
        return json.dumps([{"op": rnd.choice(["add", "remove", "replace", "move", "copy", "test", "bad"]),
                           "path": rnd.choice(["", "/", "/spec", "/metadata/labels/a", "/spec/x/0", "/a~2b", "/-"]),
                           "from": rnd.choice(["/spec", "/metadata", "/nope"]), "value": rand_json()}
                          for _ in range(rnd.randint(0, 4))]).encode()
    if t == 5:
        o = {"apiVersion": rnd.choice(["v1", "ringmaster.dev/v1alpha1", "x"]),
             "kind": rnd.choice(["ConfigMap", "Pod", "TrainingJob", "Namespace", "Lease", "Event"]),
             "metadata": {"name": rnd.choice(["f1", "f2", "Bad_Name", "", "a" * 300]),
                          "labels": {"a": "b"}, "finalizers": rnd.choice([[], ["x/y"]])},
             "spec": rand_json(), "data": {"k": "v"}}
        return json.dumps(o).encode()
    return json.dumps(rand_json()).encode()


def one(method, path, body, ctype):
    c = http.client.HTTPConnection(HOST, PORT, timeout=20)
    h = {"Accept": rnd.choice(["application/json", "application/json;as=Table;v=v1;g=meta.k8s.io"])}
    if ctype:
        h["Content-Type"] = ctype
    try:
        c.request(method, path, body=body if body else None, headers=h)
        r = c.getresponse()
        data = r.read() if method != "HEAD" else b""
    except (ConnectionError, http.client.HTTPException) as e:
        c.close()
        return None, str(e).encode()
    c.close()
    return r.status, data


bad = 0
t0 = time.time()
for i in range(N):
    segs = [rnd.choice(SEGS) for _ in range(rnd.randint(0, 8))]
    path = "/" + "/".join(urllib.parse.quote(s, safe="%~*.") for s in segs)
    q = {}
    for _ in range(rnd.randint(0, 4)):
        q[rnd.choice(QKEYS)] = rnd.choice(QVALS)
    if q.get("watch") in ("1", "true"):
        q["timeoutSeconds"] = "1"
    if q.get("follow") in ("1", "true"):
        q.pop("follow")
    if q:
        path += "?" + urllib.parse.urlencode(q)
    method = rnd.choice(METHODS)
    body = rand_body() if method in ("POST", "PUT", "PATCH", "DELETE") or rnd.random() < 0.05 else b""
    st, data = one(method, path, body, rnd.choice(CTYPES))
    if st is None:
        fail("request %d %s %s: connection error %r" % (i, method, path[:200], data[:200]))
    if st >= 400 and method != "HEAD":
        try:
            js = json.loads(data)
            good = js.get("kind") == "Status" and js.get("code") == st and js.get("apiVersion") == "v1"
        except ValueError:
            good = False
        if not good:
            bad += 1
            print("non-Status error body: %d %s %s -> %r" % (st, method, path[:200], data[:200]))
    if st >= 500 and st != 500:
        fail("unexpected %d for %s %s" % (st, method, path[:200]))
ok("%d random requests, %d without a Status error body (%.1fs)" % (N, bad, time.time() - t0))
if bad:
    fail("error bodies must be Status objects")
for size in (3 * 1024 * 1024 + 1, 20 * 1024 * 1024):
    st, data = one("POST", "/api/v1/namespaces/default/configmaps", b"{" + b" " * (size - 2) + b"}", "application/json")
    js = json.loads(data)
    if st != 413 or js.get("kind") != "Status" or js.get("code") != 413:
        fail("huge body %d -> %s %r" % (size, st, data[:200]))
ok("huge bodies (3 MiB+1, 20 MiB) -> 413 Status")
# deep nesting: rejected before any recursive walk; deep-but-allowed documents stay fast (no
# exponential comparisons)
CMS = "/api/v1/namespaces/default/configmaps"
st, data = one("POST", CMS, ('{"a":' * 990 + '1' + '}' * 990).encode(), "application/json")
if st != 400 or json.loads(data).get("kind") != "Status":
    fail("990-deep body -> %s" % st)
one("POST", CMS, b'{"metadata":{"name":"deep"}}', "application/json")
d60 = '{"a":' * 60 + '1' + '}' * 60
t1 = time.time()
st1, _ = one("PATCH", CMS + "/deep", ('{"data":{"x":"1"},"z":' + d60 + '}').encode(), "application/merge-patch+json")
st2, _ = one("PATCH", CMS + "/deep", json.dumps([{"op": "test", "path": "/z", "value": json.loads(d60)},
                                                 {"op": "add", "path": "/y", "value": json.loads(d60)}]).encode(),
             "application/json-patch+json")
deep_path = "/z" + "/a" * 59
st3, data3 = one("PATCH", CMS + "/deep", json.dumps([{"op": "replace", "path": deep_path, "value": json.loads(d60)}]).encode(),
                 "application/json-patch+json")
if (st1, st2, st3) != (200, 200, 422) or time.time() - t1 > 5:
    fail("deep documents: %s %s %s in %.1fs %r" % (st1, st2, st3, time.time() - t1, data3[:200]))
ok("nesting: >100 levels -> 400, a patch that nests >100 -> 422, 60-level documents compared in linear time")
st, data = one("GET", "/version", b"", "")
if st != 200 or json.loads(data)["minor"] != "32":
    fail("server not answering after fuzzing")
ok("server alive after fuzzing")
