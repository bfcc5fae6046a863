#!/usr/bin/env bash
# 68-operator-tls: the operator's client against an HTTPS API stand-in (Python ssl server that
# answers every LIST with an empty list and ends every WATCH) that REQUIRES a client certificate:
#  - kubeconfig with certificate-authority-data + client-certificate-data/client-key-data → the
#    operator's informers sync and /readyz turns 200 (TLS verified, client cert presented);
#  - a kubeconfig naming the wrong CA → never ready, a certificate error is logged (verification
#    is on by default);
#  - the same wrong CA with insecure-skip-tls-verify: true → ready again;
#  - a bearer token (tokenFile) reaches the server as "Authorization: Bearer ...".
source "$(dirname "$0")/6x-operator-lib.bash"
command -v openssl >/dev/null || { echo "SKIP: no openssl"; exit 0; }
cd "$T"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca >/dev/null 2>&1
openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.crt -days 2 -subj /CN=other-ca >/dev/null 2>&1
printf 'subjectAltName=IP:127.0.0.1\n' > san.ext
openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=127.0.0.1 >/dev/null 2>&1
openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt -days 2 -extfile san.ext >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -keyout cli.key -out cli.csr -subj /CN=ringmaster >/dev/null 2>&1
openssl x509 -req -in cli.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out cli.crt -days 2 >/dev/null 2>&1
echo "sekret-token" > token
PORT=$(free_port)
cat > srv.py <<'PY'
import http.server, json, ssl, sys
port, d = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        with open(d + "/auth.log", "a") as f:
            f.write("%s %s\n" % (self.headers.get("Authorization"), self.path.split("?")[0]))
        body = b"" if "watch=" in self.path else json.dumps({"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(d + "/srv.crt", d + "/srv.key")
ctx.load_verify_locations(d + "/ca.crt")
ctx.verify_mode = ssl.CERT_REQUIRED
s = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
PY
$PY srv.py "$PORT" "$T" >"$T/srv.log" 2>&1 &
PIDS+=($!)
b64() { base64 -w0 "$1"; }
kubeconfig() {  # kubeconfig CA_FILE INSECURE
  cat <<YAML
apiVersion: v1
kind: Config
current-context: tls
contexts: [{name: tls, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://127.0.0.1:$PORT", certificate-authority-data: $(b64 "$1")$( [ "$2" = 1 ] && echo ", insecure-skip-tls-verify: true")}}]
users: [{name: u, user: {tokenFile: $T/token, client-certificate-data: $(b64 cli.crt), client-key-data: $(b64 cli.key)}}]
YAML
}
run_op() {  # run_op NAME KUBECONFIG → echoes the probe port
  local pp; pp=$(free_port)
  "$RM_BIN/ringmaster" operator --kubeconfig "$2" --metrics-bind-address 127.0.0.1:0 \
     --health-probe-bind-address "127.0.0.1:$pp" --rendezvous-bind-address "127.0.0.1:$(free_port)" >"$T/op-$1.log" 2>&1 &
  PIDS+=($!); eval "PID_$1=$!"; echo "$pp" > "$T/port-$1"
}
wait_for 10 "https server" bash -c "curl -s --cacert $T/ca.crt --cert $T/cli.crt --key $T/cli.key https://127.0.0.1:$PORT/x >/dev/null"
kubeconfig ca.crt 0 > good.yaml; kubeconfig other.crt 0 > bad.yaml; kubeconfig other.crt 1 > insecure.yaml
run_op good good.yaml; run_op bad bad.yaml; run_op insecure insecure.yaml
wait_for 20 "verified operator ready" curl -fsS "http://127.0.0.1:$(cat port-good)/readyz"
wait_for 20 "insecure operator ready" curl -fsS "http://127.0.0.1:$(cat port-insecure)/readyz"
sleep 2
! curl -fsS "http://127.0.0.1:$(cat port-bad)/readyz" >/dev/null 2>&1 || fail "operator with the wrong CA became ready"
wait_for 20 "TLS error logged for the wrong CA" grep -qiE "certificate|SSL|TLS" "$T/op-bad.log"
grep -q "Bearer sekret-token /apis/ringmaster.dev/v1alpha1/trainingjobs" "$T/auth.log" || fail "token not sent"
log "PASS"
