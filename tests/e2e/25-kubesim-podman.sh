#!/usr/bin/env bash
# e2e-host: podman containers
# 25-kubesim-podman: kubesim's kubelet in container mode (--runtime podman) runs pods from their spec
# with podman, checked from inside the containers: image + command/args, env (value, fieldRef,
# secretKeyRef, configMapKeyRef, envFrom), runAsUser/runAsGroup, readOnlyRootFilesystem (the root is
# not writable, declared volumes are), volumes (emptyDir, hostPath, secret and configMap files, a PVC
# folder that outlives the pod, the service account token), memory limit, a peer pod's DNS name
# (hostname.subdomain.ns.svc) and a Service name, `kubectl logs`, a missing image (ErrImageNeverPull),
# and graceful termination (SIGTERM reaches the container's process; it runs its handler).
. "$RM_ROOT/tests/kubesim/testlib.sh"
ks_need kubectl "$KS_KUBECTL_WHY"
ks_need_podman
IMG=docker.io/library/debian:12-slim
start=$(date +%s)
ks_start --runtime podman
HP="$KS_TMP/host"; mkdir -p "$HP"
cat > "$KS_TMP/pods.yaml" <<Y
apiVersion: v1
kind: Secret
metadata: {name: s1}
data: {password: $(printf hunter2 | base64)}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c1}
data: {mode: fast, level: "3"}
---
apiVersion: v1
kind: Service
metadata: {name: peers}
spec: {clusterIP: None, selector: {app: peer}, ports: [{port: 1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: peer, labels: {app: peer}}
spec:
  hostname: peer-0
  subdomain: peers
  containers:
  - {name: main, image: $IMG, command: [sleep, "300"]}
---
apiVersion: v1
kind: Pod
metadata: {name: probe}
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 65532, runAsGroup: 65532}
  containers:
  - name: main
    image: $IMG
    command: [/bin/sh, -c]
    args:
    - |
      set -u
      echo "uid=\$(id -u) gid=\$(id -g)"
      echo "greeting=\$GREETING pod=\$POD_NAME password=\$PASSWORD mode=\$mode level=\$CFG_level"
      if touch /rootfs-write 2>/dev/null; then echo "root=writable"; else echo "root=readonly"; fi
      echo hi > /scratch/x && echo "scratch=\$(cat /scratch/x)"
      echo "secretfile=\$(cat /etc/creds/password) cmfile=\$(cat /etc/cfg/mode)"
      echo "sa-namespace=\$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
      test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo "sa-token=present"
      echo "\$(date +%s)" >> /data/runs && echo "pvc-runs=\$(wc -l < /data/runs)"
      echo "host=\$(cat /host/marker)"
      echo "peer=\$(getent hosts peer-0.peers.default.svc | cut -d' ' -f1) svc=\$(getent hosts peers.default.svc | cut -d' ' -f1)"
      m=/sys/fs/cgroup/memory/memory.limit_in_bytes; [ -r \$m ] || m=/sys/fs/cgroup/memory.max
      echo "memlimit=\$(cat \$m)"
      echo "env-leak=\${KUBECONFIG:-none}"
    env:
    - {name: GREETING, value: hello}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: PASSWORD
      valueFrom: {secretKeyRef: {name: s1, key: password}}
    - name: mode
      valueFrom: {configMapKeyRef: {name: c1, key: mode}}
    envFrom:
    - {prefix: CFG_, configMapRef: {name: c1}}
    resources: {limits: {memory: 64Mi}}
    securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: creds, mountPath: /etc/creds}
    - {name: cfg, mountPath: /etc/cfg}
    - {name: data, mountPath: /data}
    - {name: host, mountPath: /host}
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: creds, secret: {secretName: s1}}
  - {name: cfg, configMap: {name: c1}}
  - {name: data, persistentVolumeClaim: {claimName: shared}}
  - {name: host, hostPath: {path: $HP}}
Y
echo marker-from-host > "$HP/marker"
k apply -f "$KS_TMP/pods.yaml" >/dev/null || fail "apply pods"
phase() { k get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
for _ in $(seq 1 300); do [ "$(phase peer)" = Running ] && break; sleep 0.2; done
[ "$(phase peer)" = Running ] || fail "peer pod not Running: $(k get pod peer -o yaml | tail -30)"
for _ in $(seq 1 450); do p=$(phase probe); [ "$p" = Succeeded ] || [ "$p" = Failed ] && break; sleep 0.2; done
out=$(k logs probe 2>&1)
echo "$out"
assert_eq "$(phase probe)" Succeeded "the probe pod's container ran to completion"
assert_contains "$out" "uid=65532 gid=65532" "runAsUser/runAsGroup"
assert_contains "$out" "greeting=hello pod=probe password=hunter2 mode=fast level=3" "env: value, fieldRef, secretKeyRef, configMapKeyRef, envFrom"
assert_contains "$out" "root=readonly" "readOnlyRootFilesystem"
assert_contains "$out" "scratch=hi" "emptyDir writable under a read-only root"
assert_contains "$out" "secretfile=hunter2 cmfile=fast" "secret and configMap volumes as files"
assert_contains "$out" "sa-namespace=default" "service account namespace mounted"
assert_contains "$out" "sa-token=present" "service account token mounted"
assert_contains "$out" "pvc-runs=1" "PVC folder mounted"
assert_contains "$out" "host=marker-from-host" "hostPath"
peer_ip=$(k get pod peer -o jsonpath='{.status.podIP}')
assert_contains "$out" "peer=$peer_ip svc=$peer_ip" "hostname.subdomain.ns.svc and the Service name resolve to the peer pod's IP"
assert_contains "$out" "memlimit=67108864" "resources.limits.memory as a cgroup limit"
assert_contains "$out" "env-leak=none" "kubesim's own environment does not leak into containers"

# the PVC folder outlives the pod: a second pod sees the first one's line
sed -e 's/name: probe}/name: probe2}/' "$KS_TMP/pods.yaml" | awk 'BEGIN{RS="---\n"; ORS="---\n"} /name: probe2/' > "$KS_TMP/p2.yaml"
k apply -f "$KS_TMP/p2.yaml" >/dev/null || fail "apply probe2"
for _ in $(seq 1 450); do p=$(phase probe2); [ "$p" = Succeeded ] || [ "$p" = Failed ] && break; sleep 0.2; done
assert_contains "$(k logs probe2)" "pvc-runs=2" "a PVC's data outlives the pod"

# a missing image is never pulled
printf 'apiVersion: v1\nkind: Pod\nmetadata: {name: nope}\nspec:\n  restartPolicy: Never\n  containers: [{name: main, image: "ringmaster/does-not-exist:1"}]\n' | k apply -f - >/dev/null
for _ in $(seq 1 150); do r=$(k get pod nope -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}'); [ -n "$r" ] && break; sleep 0.2; done
assert_eq "$r" ErrImageNeverPull "a missing image is ErrImageNeverPull, not a pull"

# graceful termination: SIGTERM reaches the container's shell, whose handler writes to the hostPath
cat > "$KS_TMP/term.yaml" <<Y
apiVersion: v1
kind: Pod
metadata: {name: term}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: main
    image: $IMG
    command: [/bin/sh, -c, 'trap "echo got-TERM > /host/term; exit 0" TERM; echo ready; while :; do sleep 0.2; done']
    volumeMounts: [{name: host, mountPath: /host}]
  volumes: [{name: host, hostPath: {path: $HP}}]
Y
k apply -f "$KS_TMP/term.yaml" >/dev/null
for _ in $(seq 1 300); do [ "$(phase term)" = Running ] && k logs term 2>/dev/null | grep -q ready && break; sleep 0.2; done
t0=$(date +%s)
k delete pod term --wait=true --timeout=25s >/dev/null || fail "delete term"
[ "$(cat "$HP/term" 2>/dev/null)" = got-TERM ] && ok "graceful termination: the container got SIGTERM and ran its handler ($(( $(date +%s) - t0 )) s)" \
  || fail "the container did not get SIGTERM"
k delete pod peer nope --wait=false >/dev/null 2>&1 || true
echo "container-mode kubelet checks took $(( $(date +%s) - start )) s"
