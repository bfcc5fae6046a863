#!/usr/bin/env bash
# `ringmaster tokenize`: a text file becomes llm.c token shards (version 1 headers, uint16 tokens,
# one per byte) split into training and validation shards of a given size, listed in index.txt; an
# independent reader
# (Python's struct) gets the text back byte for byte; bad flags and inputs exit 2 naming them.
set -euo pipefail
R="$RM_BIN/ringmaster"
T="$TMPDIR/tok"; mkdir -p "$T"
fail() { echo "FAIL: $*"; exit 1; }
/usr/bin/python3 -c 'import random; random.seed(5); open("'"$T"'/corpus.txt","w").write("".join(random.choice("abc xyz\nQ!") for _ in range(25000)))'
out=$("$R" tokenize --val-fraction 0.2 --shard-tokens 7000 "$T/corpus.txt" "$T/shards")
echo "$out" | grep -q "25000 tokens (vocabulary 256): 20000 training, 5000 validation, in 4 shards" || fail "summary: $out"
[ -f "$T/shards/corpus_train_000002.bin" ] && [ -f "$T/shards/corpus_val_000000.bin" ] || fail "shard names: $(ls "$T/shards")"
# index.txt lists the shards (an http(s) folder URI fetches by it: docs/models-and-data.md)
[ "$(cat "$T/shards/index.txt")" = "$(cd "$T/shards" && ls *.bin)" ] || fail "index.txt: $(cat "$T/shards/index.txt")"
/usr/bin/python3 - "$T" <<'PY' || fail "round trip"
import glob, struct, sys
t = sys.argv[1]
data = open(t + "/corpus.txt", "rb").read()
got = b""
for split in ("train", "val"):
    for f in sorted(glob.glob(f"{t}/shards/corpus_{split}_*.bin")):
        b = open(f, "rb").read()
        h = struct.unpack("<256i", b[:1024])
        assert h[0] == 20240520 and h[1] == 1 and not any(h[3:]), f
        assert len(b) == 1024 + 2 * h[2], f
        assert h[2] <= 7000, f
        got += bytes(struct.unpack(f"<{h[2]}H", b[1024:]))
assert got == data
PY
expect2() { local what=$1; shift; set +e; msg=$("$R" tokenize "$@" 2>&1); rc=$?; set -e
  [ $rc -eq 2 ] || fail "$what: exit $rc"; echo "$msg" | grep -q -- "$what" || fail "$what: $msg"; }
expect2 "--val-fraction" --val-fraction 1 "$T/corpus.txt" "$T/x"
expect2 "--shard-tokens" --shard-tokens 0 "$T/corpus.txt" "$T/x"
expect2 "missing.txt" "$T/missing.txt" "$T/x"
: > "$T/empty.txt"; expect2 "empty file" "$T/empty.txt" "$T/x"
expect2 "usage" "$T/corpus.txt"
echo "ok - tokenize: shards round-trip the text; bad input exits 2 naming it"
