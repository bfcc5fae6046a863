#!/usr/bin/env bash
# 65-operator-fashion-mnist: the shipped example (deploy/examples/fashion-mnist.yaml: 4 workers,
# MLP 512-256, 10 epochs) through the real kubectl on kubesim — only checkpoint.path is pointed at
# a temp folder (kubesim runs pods as local processes; a cluster mounts a shared volume there).
# Succeeds with its accuracy in `kubectl get tj`; `kubectl delete tj` removes its pods.
source "$(dirname "$0")/6x-operator-lib.bash"
RDZV_PORT=$(free_port)
start_kubesim
install_crd
start_operator a
mkdir -p "$T/ckpt/default/fashion-mnist"
sed "s#path: /checkpoints#path: $T/ckpt#" "$RM_ROOT/deploy/examples/fashion-mnist.yaml" | k apply -f - >/dev/null
wait_for 30 "4 pods" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=fashion-mnist --no-headers 2>/dev/null | grep -c .) -eq 4 ]"
wait_for 60 "Running" tj_phase_is fashion-mnist Running
k get tj fashion-mnist
wait_for 240 "Succeeded" tj_phase_is fashion-mnist Succeeded
k get tj fashion-mnist | tee "$T/get.txt"
acc=$(tj_field fashion-mnist '{.status.result.testAccuracy}')
log "accuracy=$acc seconds=$(tj_field fashion-mnist '{.status.result.seconds}') restarts=$(tj_field fashion-mnist '{.status.restarts}')"
$PY -c "import sys; sys.exit(0 if float('$acc') > 0.85 else 1)" || fail "accuracy $acc"
k delete tj fashion-mnist --timeout=30s >/dev/null
wait_for 30 "pods removed" bash -c "[ \$(kubectl get pods -l ringmaster.dev/job-name=fashion-mnist --no-headers 2>/dev/null | grep -c .) -eq 0 ]"
log "PASS"
