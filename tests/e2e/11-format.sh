#!/usr/bin/env bash
# One brace style and line length across the tree (docs/c-style.md, .clang-format): every tracked
# C and CUDA source is what clang-format makes of it, so style never drifts file by file and a
# reformat never again lands in a commit that changes code.
set -euo pipefail
root="$RM_ROOT"
cd "$root"
command -v clang-format >/dev/null || { echo "clang-format missing (make deps installs it)"; exit 1; }
bad=()
while IFS= read -r f; do
  clang-format --style=file --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.c' '*.h')
if [ ${#bad[@]} -gt 0 ]; then
  echo "not in the house format (run: clang-format -i FILE):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
# and the check notices a file that is not formatted
tmp="$TMPDIR/fmt"; mkdir -p "$tmp" && cp .clang-format "$tmp/"
printf 'int f(void) { return 1; }\n' > "$tmp/x.c"
if (cd "$tmp" && clang-format --style=file --dry-run --Werror x.c >/dev/null 2>&1); then
  echo "clang-format accepted an unformatted file"; exit 1
fi
echo "ok - $(git ls-files '*.c' '*.h' | wc -l) C files in the house format; an unformatted one is refused"
