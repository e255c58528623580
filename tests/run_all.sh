#!/bin/sh
# Runs each test binary given as argument, sums their RESULT lines and prints the closing
# "N passed, N failed, N skipped" line. A binary that crashes or prints no RESULT line counts as
# one failure. Exit status is non-zero when anything failed.
P=0; F=0; S=0
for t in "$@"; do
  name=$(basename "$t")
  out=$("$t" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -v '^RESULT ' | sed "s/^/[$name] /"
  line=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
  if [ -z "$line" ]; then
    echo "[$name] CRASHED or exited early (rc=$rc, no RESULT line)"; F=$((F + 1)); continue
  fi
  p=$(echo "$line" | sed 's/.*passed=\([0-9]*\).*/\1/')
  f=$(echo "$line" | sed 's/.*failed=\([0-9]*\).*/\1/')
  s=$(echo "$line" | sed 's/.*skipped=\([0-9]*\).*/\1/')
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; echo "[$name] exit code $rc"; fi
  printf '%-28s passed=%-6s failed=%-4s skipped=%s\n' "$name" "$p" "$f" "$s"
  P=$((P + p)); F=$((F + f)); S=$((S + s))
done
echo "$P passed, $F failed, $S skipped"
[ "$F" = 0 ]
