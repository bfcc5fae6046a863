"""Tiny raw-HTTP helper for kubesim tests (stdlib only): requests, watch streams, assertions."""
import http.client
import json
import os
import socket
import sys
import time
import urllib.parse

URL = os.environ.get("KS_URL", "")
_u = urllib.parse.urlparse(URL)
HOST, PORT = _u.hostname, _u.port


def ok(msg):
    print("ok - " + msg, flush=True)


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg, detail=""):
    if not cond:
        fail(msg + (": " + str(detail)[:800] if detail != "" else ""))
    ok(msg)


def req(method, path, body=None, ctype="application/json", headers=None, timeout=15):
    c = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    h = dict(headers or {})
    data = None
    if body is not None:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        if isinstance(data, str):
            data = data.encode()
        h["Content-Type"] = ctype
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    raw = r.read()
    hdrs = r.getheaders()
    c.close()
    try:
        js = json.loads(raw) if raw else None
    except ValueError:
        js = raw.decode(errors="replace")
    return r.status, hdrs, js


def get(path, **kw):
    return req("GET", path, **kw)


def post(path, body, **kw):
    return req("POST", path, body, **kw)


def put(path, body, **kw):
    return req("PUT", path, body, **kw)


def patch(path, body, ctype="application/merge-patch+json", **kw):
    return req("PATCH", path, body, ctype=ctype, **kw)


def delete(path, body=None, **kw):
    return req("DELETE", path, body, **kw)


def is_status(js, code):
    return isinstance(js, dict) and js.get("kind") == "Status" and js.get("code") == code \
        and js.get("apiVersion") == "v1" and "status" in js


def watch(path, secs, headers=None):
    """Open a watch, collect events for up to secs (or until the server closes). Returns
    (http status, [events], closed_by_server)."""
    c = http.client.HTTPConnection(HOST, PORT, timeout=secs + 5)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    if r.status != 200:
        body = r.read()
        c.close()
        return r.status, [json.loads(body)] if body else [], True
    events = []
    end = time.time() + secs
    closed = False
    sock = r.fp.raw._sock if hasattr(r.fp, "raw") else None
    buf = b""
    while time.time() < end:
        if sock:
            sock.settimeout(max(0.05, end - time.time()))
        try:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        except (socket.timeout, TimeoutError):
            break
        except http.client.IncompleteRead:
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                events.append(json.loads(line))
    c.close()
    return 200, events, closed


def wait_for(fn, what, secs=20, interval=0.1):
    end = time.time() + secs
    last = None
    while time.time() < end:
        try:
            last = fn()
        except (OSError, http.client.HTTPException):
            last = None
        if last:
            return last
        time.sleep(interval)
    fail(what + " (timed out)")
