#!/bin/sh
# Runs the test programs given as arguments, JOBS at a time (environment; default 1), sums their
# RESULT lines and prints the closing "N passed, N failed, N skipped" line and the wall time.
# A program may be a binary or a shell script (*.sh, run with sh); each must print one
# "RESULT ... passed=P failed=F skipped=S" line. A program that crashes or prints no RESULT line
# counts as one failure, as does a non-zero exit status with failed=0. Each program's output is
# printed in one block (lines prefixed "[name] ", then its own summary line with its wall time)
# when it finishes; programs start in the order given (put the longest first);
# blocks of programs running at the same time never interleave. Exit status is non-zero when
# anything failed.
#   JOBS=4 sh tests/run_all.sh build/tests/test_a build/tests/test_b tests/check_layers.sh

# ---- one program: run it, write NAME.sum ("P F S") into $2, print its block ----
if [ "$1" = "--one" ]; then
  t=$2; dir=$3
  name=$(basename "$t" .sh)
  t0=$(date +%s.%N)
  case "$t" in
    *.sh) out=$(sh "$t" 2>&1); rc=$? ;;
    *) out=$("$t" 2>&1); rc=$? ;;
  esac
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  {
    printf '%s\n' "$out" | grep -v '^RESULT ' | sed "s/^/[$name] /"
    line=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
    if [ -z "$line" ]; then
      echo "[$name] CRASHED or exited early (rc=$rc, no RESULT line)"
      echo "0 1 0" > "$dir/$name.sum"
    else
      p=$(echo "$line" | sed 's/.*passed=\([0-9]*\).*/\1/')
      f=$(echo "$line" | sed 's/.*failed=\([0-9]*\).*/\1/')
      s=$(echo "$line" | sed 's/.*skipped=\([0-9]*\).*/\1/')
      if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; echo "[$name] exit code $rc"; fi
      printf '%-28s passed=%-6s failed=%-4s skipped=%-4s %7s s\n' "$name" "$p" "$f" "$s" "$secs"
      echo "$p $f $s" > "$dir/$name.sum"
    fi
  } > "$dir/$name.out"
  if command -v flock >/dev/null 2>&1; then flock "$dir/.lock" cat "$dir/$name.out"
  else cat "$dir/$name.out"; fi
  exit 0
fi

JOBS=${JOBS:-1}
dir=$(mktemp -d "${TMPDIR:-/tmp}/afinar_tests_XXXXXX") || exit 1
start=$(date +%s.%N)
: > "$dir/.lock"
printf '%s\n' "$@" | xargs -P "$JOBS" -I{} sh "$0" --one {} "$dir"
P=0; F=0; S=0
for t in "$@"; do
  name=$(basename "$t" .sh)
  if [ -f "$dir/$name.sum" ]; then read -r p f s < "$dir/$name.sum"
  else p=0; f=1; s=0; echo "[$name] did not run"; fi
  P=$((P + p)); F=$((F + f)); S=$((S + s))
done
end=$(date +%s.%N)
# a recap of what failed, so the last lines of a long log (all a CI page may show) name it
if [ "$F" != 0 ]; then
  for t in "$@"; do
    name=$(basename "$t" .sh)
    [ -f "$dir/$name.sum" ] || { echo "FAILED $name: did not run"; continue; }
    read -r p f s < "$dir/$name.sum"
    [ "$f" = 0 ] && continue
    echo "FAILED $name ($f):"
    grep -E '\] (FAIL|CRASHED|exit code)|ERROR: (Address|Leak)Sanitizer|runtime error' "$dir/$name.out" | head -n 8
  done
fi
rm -rf "$dir"
echo "$P passed, $F failed, $S skipped"
awk -v a="$start" -v b="$end" -v n="$#" -v j="$JOBS" \
  'BEGIN { printf "wall time %.1f s (%d programs, %d at a time)\n", b - a, n, j }'
[ "$F" = 0 ]
