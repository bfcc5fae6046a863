#!/usr/bin/env bash
# BENCHMARKS.md is exactly what bench/assemble.sh builds from bench/results/*.md (the scripts' output)
# and bench/notes/*.md (curated analyses): an edit made to BENCHMARKS.md alone would be lost at the
# next `make bench`, and a part left out of the assembly would drop its section.
set -euo pipefail
root="$RM_ROOT"
"$root/bench/assemble.sh" --check
# every curated note is in the assembly (a new note not listed in PARTS would never be published)
for f in "$root"/bench/notes/*.md; do
  n=$(basename "$f" .md)
  grep -q "notes/$n\b" "$root/bench/assemble.sh" || { echo "bench/notes/$n.md is not among bench/assemble.sh's PARTS"; exit 1; }
done
# and --check notices a difference
tmp="$TMPDIR/bm"; mkdir -p "$tmp/bench" && cp -r "$root/bench/assemble.sh" "$root/bench/results" "$root/bench/notes" "$tmp/bench/"
cp "$root/BENCHMARKS.md" "$tmp/BENCHMARKS.md"
echo "an edit made here only" >> "$tmp/BENCHMARKS.md"
if "$tmp/bench/assemble.sh" --check 2>/dev/null; then echo "--check accepted a BENCHMARKS.md that differs from its parts"; exit 1; fi
echo "ok - BENCHMARKS.md matches bench/results + bench/notes; --check refuses a stray edit"
