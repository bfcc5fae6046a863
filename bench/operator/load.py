#!/usr/bin/python3
"""load.py — drive the operator benchmark against kubesim (kubelet off).

  load.py fleet URL JOBS WORKERS   create JOBS TrainingJobs x WORKERS at once (16 client threads),
                                   watch pods, report pods/s and per-job create->all-pods latency
  load.py big URL WORKERS KUBECTL  one WORKERS-wide job: time from the TrainingJob's creation (and
                                   from `kubectl apply` start) to its last pod
  load.py raw URL PODS             the ceiling: POST PODS bare pods straight to the API (16 threads,
                                   no operator) and time them
  load.py running URL              play every pod's kubelet once: PATCH each pod's status to Running
                                   and Ready (16 threads; no processes, no progress reports)
  load.py wait-running URL PODS S  kubesim's own kubelet runs the pods (scale.sh SWARM=1): poll until
                                   PODS pods are Running and Ready (at most S seconds); the time
  load.py idle URL SECONDS [UA]    reset kubesim's request log, wait, count the requests made in the
                                   window (those whose user agent starts with UA, default "ringmaster"),
                                   writes (create/update/patch/delete) apart, by verb and resource
  load.py change URL JOBS N        N times: suspend one job (merge PATCH spec.runPolicy.suspend), time
                                   until the watch shows its Suspended condition True; p50/p99
Prints one JSON object on stdout. Uses only the standard library (plain HTTP on 127.0.0.1).
"""
import http.client, json, sys, threading, time, subprocess, urllib.parse

def conn(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60)

def req(c, method, path, body=None):
    h = {"Content-Type": "application/json", "Accept": "application/json"}
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    return r.status, (json.loads(data) if data else None)

def job(name, workers):
    # progressDeadlineSeconds 0: pods that are Running but never report (load.py running) are
    # not restarted, so an idle fleet stays idle
    return {"apiVersion": "ringmaster.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": workers, "backend": "ring",
                     "restartPolicy": {"progressDeadlineSeconds": 0},
                     "training": {"model": {"type": "mlp", "hidden": [128]}, "epochs": 1},
                     "template": {"spec": {"containers": [{"name": "worker", "image": "ringmaster/worker:latest"}]}}}}

class PodWatch(threading.Thread):
    def __init__(self, url, want):
        super().__init__(daemon=True)
        self.url, self.want = url, want
        c = conn(url)
        st, lst = req(c, "GET", "/api/v1/namespaces/default/pods?limit=1")
        self.rv = lst["metadata"]["resourceVersion"]
        self.first = {}          # pod name -> time first seen
        self.per_job = {}        # job -> list of times
        self.done = threading.Event()
    def run(self):
        c = conn(self.url)
        c.request("GET", "/api/v1/namespaces/default/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion=" + self.rv)
        r = c.getresponse()
        buf = b""
        while not self.done.is_set():
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                ev = json.loads(line)
                if ev.get("type") != "ADDED":
                    continue
                md = ev["object"]["metadata"]
                if md["name"] in self.first:
                    continue
                now = time.monotonic()
                self.first[md["name"]] = now
                j = md.get("labels", {}).get("ringmaster.dev/job-name", "?")
                self.per_job.setdefault(j, []).append(now)
                if len(self.first) >= self.want:
                    self.done.set()

def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = max(0, min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]

def fleet(url, njobs, workers):
    w = PodWatch(url, njobs * workers)
    w.start()
    created = {}
    names = ["bench-%04d" % i for i in range(njobs)]
    lock = threading.Lock()
    def poster(chunk):
        c = conn(url)
        for n in chunk:
            t = time.monotonic()
            st, _ = req(c, "POST", "/apis/ringmaster.dev/v1alpha1/namespaces/default/trainingjobs", job(n, workers))
            if st not in (200, 201):
                print("create %s -> %d" % (n, st), file=sys.stderr)
            with lock:
                created[n] = t
    t0 = time.monotonic()
    ths = [threading.Thread(target=poster, args=(names[i::16],)) for i in range(16)]
    for t in ths: t.start()
    for t in ths: t.join()
    t_applied = time.monotonic()
    w.done.wait(max(180, njobs * workers / 50))  # at least 50 pods/s, or the count says how many came
    t_end = max(w.first.values()) if w.first else time.monotonic()
    lat = [max(w.per_job[n]) - created[n] for n in names if len(w.per_job.get(n, [])) >= workers]
    return {"jobs": njobs, "workers": workers, "pods": len(w.first),
            "apply_seconds": round(t_applied - t0, 3),
            "all_pods_seconds": round(t_end - t0, 3),
            "pods_per_second": round(len(w.first) / (t_end - t0), 1) if w.first else 0,
            "job_to_all_pods_p50_ms": round(pct(lat, 50) * 1000, 1) if lat else None,
            "job_to_all_pods_p99_ms": round(pct(lat, 99) * 1000, 1) if lat else None,
            "complete_jobs": len(lat)}

def big(url, workers, kubectl):
    w = PodWatch(url, workers)
    w.start()
    manifest = json.dumps(job("big-%d" % int(time.time()), workers))
    t0 = time.monotonic()
    p = subprocess.run([kubectl, "apply", "-f", "-"], input=manifest.encode(), capture_output=True)
    t_kubectl = time.monotonic()
    if p.returncode:
        print(p.stderr.decode(), file=sys.stderr)
    w.done.wait(30)
    t_end = max(w.first.values()) if w.first else time.monotonic()
    first = min(w.first.values()) if w.first else t_end
    return {"workers": workers, "pods": len(w.first),
            "kubectl_apply_seconds": round(t_kubectl - t0, 3),
            "apply_start_to_all_pods_ms": round((t_end - t0) * 1000, 1),
            "kubectl_return_to_all_pods_ms": round((t_end - t_kubectl) * 1000, 1),
            "first_to_last_pod_ms": round((t_end - first) * 1000, 1)}

def raw(url, npods, template=None):
    """npods bare pod POSTs from 16 threads; template: a pod (JSON file) to post copies of, so the
    ceiling posts the same bytes the operator does (its metadata trimmed to a name and labels)."""
    names = ["raw-%05d" % i for i in range(npods)]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"raw": "1"}},
            "spec": {"containers": [{"name": "c", "image": "ringmaster/worker:latest"}]}}
    if template:
        with open(template) as f:
            tp = json.load(f)
        body = {"apiVersion": "v1", "kind": "Pod", "spec": tp["spec"],
                "metadata": {"labels": dict(tp["metadata"].get("labels", {}), raw="1"),
                             "annotations": tp["metadata"].get("annotations", {})}}
        body["spec"].pop("nodeName", None)
    def poster(chunk):
        c = conn(url)
        for n in chunk:
            b = dict(body, metadata=dict(body["metadata"], name=n))
            req(c, "POST", "/api/v1/namespaces/default/pods", b)
    t0 = time.monotonic()
    ths = [threading.Thread(target=poster, args=(names[i::16],)) for i in range(16)]
    for t in ths: t.start()
    for t in ths: t.join()
    dt = time.monotonic() - t0
    return {"pods": npods, "seconds": round(dt, 3), "pods_per_second": round(npods / dt, 1)}

def list_all(c, path):
    items, cont = [], ""
    while True:
        st, lst = req(c, "GET", path + "?limit=5000" + ("&continue=" + urllib.parse.quote(cont) if cont else ""))
        if st != 200:
            raise SystemExit("list %s -> %d" % (path, st))
        items += lst["items"]
        cont = lst["metadata"].get("continue")
        if not cont:
            return items

def running(url):
    names = [p["metadata"]["name"] for p in list_all(conn(url), "/api/v1/namespaces/default/pods")]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    bad = []
    def patcher(chunk):
        c = conn(url)
        for i, n in chunk:
            body = {"status": {"phase": "Running", "podIP": "10.%d.%d.%d" % (i >> 16 & 255, i >> 8 & 255, i & 255),
                               "startTime": now,
                               "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
                               "containerStatuses": [{"name": "worker", "ready": True, "restartCount": 0,
                                                      "image": "ringmaster/worker:latest", "imageID": "",
                                                      "state": {"running": {"startedAt": now}}}]}}
            h = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
            c.request("PATCH", "/api/v1/namespaces/default/pods/%s/status" % n, json.dumps(body), h)
            r = c.getresponse(); r.read()
            if r.status != 200:
                bad.append((n, r.status))
    t0 = time.monotonic()
    idx = list(enumerate(names))
    ths = [threading.Thread(target=patcher, args=(idx[i::16],)) for i in range(16)]
    for t in ths: t.start()
    for t in ths: t.join()
    return {"pods": len(names), "seconds": round(time.monotonic() - t0, 3), "failed": len(bad)}

def wait_running(url, npods, limit):
    c = conn(url)
    t0 = time.monotonic()
    ready = 0
    while time.monotonic() - t0 < limit:
        ready = 0
        for p in list_all(c, "/api/v1/namespaces/default/pods"):
            st = p.get("status") or {}
            conds = {cd.get("type"): cd.get("status") for cd in st.get("conditions") or []}
            ready += st.get("phase") == "Running" and conds.get("Ready") == "True"
        if ready >= npods:
            break
        time.sleep(1)
    return {"pods": npods, "ready": ready, "seconds": round(time.monotonic() - t0, 3)}

def idle(url, seconds, ua):
    c = conn(url)
    req(c, "DELETE", "/kubesim/requests")
    time.sleep(seconds)
    st, log = req(c, "GET", "/kubesim/requests?userAgent=" + urllib.parse.quote(ua))
    writes, reads = {}, {}
    for r in log["items"]:
        key = r["verb"] + " " + r["resource"] + ("/" + r["subresource"] if r["subresource"] else "")
        d = writes if r["verb"] in ("create", "update", "patch", "delete", "deletecollection") else reads
        d[key] = d.get(key, 0) + 1
    per_min = 60.0 / seconds
    return {"seconds": seconds, "writes": sum(writes.values()), "writes_per_minute": round(sum(writes.values()) * per_min, 1),
            "reads": sum(reads.values()), "writes_by": writes, "reads_by": reads}

def change(url, njobs, n):
    c = conn(url)
    st, lst = req(c, "GET", "/apis/ringmaster.dev/v1alpha1/namespaces/default/trainingjobs?limit=1")
    rv = lst["metadata"]["resourceVersion"]
    seen, cv = {}, threading.Condition()
    def watch():
        w = conn(url)
        w.request("GET", "/apis/ringmaster.dev/v1alpha1/namespaces/default/trainingjobs?watch=1&timeoutSeconds=600&resourceVersion=" + rv)
        r = w.getresponse()
        buf = b""
        while True:
            chunk = r.read1(65536)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.strip():
                    continue
                o = json.loads(line)["object"]
                for cd in (o.get("status") or {}).get("conditions") or []:
                    if cd.get("type") == "Suspended" and cd.get("status") == "True":
                        with cv:
                            seen.setdefault(o["metadata"]["name"], time.monotonic())
                            cv.notify_all()
    threading.Thread(target=watch, daemon=True).start()
    time.sleep(0.5)
    lat, step = [], max(1, njobs // n)
    h = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
    for i in range(n):
        name = "bench-%04d" % ((i * step) % njobs)
        t0 = time.monotonic()
        c.request("PATCH", "/apis/ringmaster.dev/v1alpha1/namespaces/default/trainingjobs/" + name,
                  json.dumps({"spec": {"runPolicy": {"suspend": True}}}), h)
        r = c.getresponse(); r.read()
        with cv:
            cv.wait_for(lambda: name in seen, timeout=30)
        if name in seen:
            lat.append(seen[name] - t0)
        time.sleep(0.2)
    return {"changes": n, "observed": len(lat),
            "p50_ms": round(pct(lat, 50) * 1000, 1) if lat else None,
            "p99_ms": round(pct(lat, 99) * 1000, 1) if lat else None,
            "max_ms": round(max(lat) * 1000, 1) if lat else None}

if __name__ == "__main__":
    if sys.argv[1] == "raw":
        print(json.dumps(raw(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)))
    elif sys.argv[1] == "running":
        print(json.dumps(running(sys.argv[2])))
    elif sys.argv[1] == "wait-running":
        print(json.dumps(wait_running(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))))
    elif sys.argv[1] == "idle":
        print(json.dumps(idle(sys.argv[2], float(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else "ringmaster")))
    elif sys.argv[1] == "change":
        print(json.dumps(change(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    elif sys.argv[1] == "fleet":
        print(json.dumps(fleet(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        print(json.dumps(big(sys.argv[2], int(sys.argv[3]), sys.argv[4])))
