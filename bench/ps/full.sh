#!/usr/bin/env bash
# bench/ps/full.sh — every parameter-server measurement (docs/strategies.md#parameter-servers) in one
# command, for an idle machine (about 12 minutes on 2 CPUs; longer under load: the table records the
# load per run):
#   1. throughput at 2 workers, no straggler: ring vs sync PS b = 0 with S = 1 and S = 2 servers,
#      3 passes with the variants alternating (bench/results/ps-throughput.md);
#   2. the straggler experiment at 4 workers: ring, sync b = 0 (S = 1, 2), sync b = 1, async
#      Downpour s = 0 and s = 4, with no, a persistent and a transient straggler
#      (bench/results/ps.md);
#   3. the anchor: PyTorch's torch.distributed.rpc parameter server beside ringmaster's
#      (1 epoch: ANCHOR_EPOCHS; bench/results/ps-anchor.md).
# Knobs: REPEAT (3, for 1), EPOCHS (6), ANCHOR (1), STRAGGLERS and VARIANTS (for 2), OUT and
# THROUGHPUT_OUT (the two tables); the others pass through to run.sh. A smoke run (minutes):
#   EPOCHS=1 HIDDEN=64 TARGET=0.8 REPEAT=1 ANCHOR=0 STRAGGLERS=transient \
#   VARIANTS="sync-b0-S2 async-s4" OUT=/tmp/ps.md THROUGHPUT_OUT=/tmp/ps-tp.md bench/ps/full.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
WORKERS=2 STRAGGLERS=none VARIANTS="ring sync-b0 sync-b0-S2" REPEAT=${REPEAT:-3} ANCHOR=0 \
    OUT=${THROUGHPUT_OUT:-$here/../results/ps-throughput.md} "$here/run.sh"
WORKERS=4 STRAGGLERS=${STRAGGLERS:-none persistent transient} \
    VARIANTS=${VARIANTS:-ring sync-b0 sync-b0-S2 sync-b1 async-s0 async-s4} REPEAT=1 ANCHOR=${ANCHOR:-1} \
    ANCHOR_EPOCHS=${ANCHOR_EPOCHS:-1} \
    "$here/run.sh"
