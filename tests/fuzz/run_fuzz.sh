#!/bin/sh
# Runs each libFuzzer target named on the command line for $FUZZ_SECONDS seconds on a fresh copy of
# its seed corpus (tests/fuzz/corpus/<target> -> $FUZZ_BUILD/corpus/<target>), with its dictionary
# when tests/fuzz/<target>.dict exists, and prints one line per target with the executions reached
# (libFuzzer's stat::number_of_executed_units), exec/s and the final cov:/ft: numbers.
# Crash inputs land in $FUZZ_BUILD/artifacts/. Exit status: non-zero if any target failed.
B=${FUZZ_BUILD:-build-fuzz}
S=${FUZZ_SECONDS:-60}
fail=0
mkdir -p "$B/artifacts" "$B/logs"
for t in "$@"; do
  case $t in
    gguf|gguf_tok) ml=32768 ;;
    adapter) ml=32768 ;;
    safetensors) ml=16384 ;;
    tok_json|chat) ml=32768 ;;
    jsonl|lm_jsonl|serve_req) ml=8192 ;;
    *) ml=4096 ;;
  esac
  rm -rf "$B/corpus/$t"; mkdir -p "$B/corpus/$t"
  [ -d "tests/fuzz/corpus/$t" ] && cp tests/fuzz/corpus/$t/* "$B/corpus/$t/" 2>/dev/null
  dict=""; [ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
  log="$B/logs/$t.log"
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$B/fuzz_$t" -max_total_time="$S" -max_len=$ml -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      $dict -artifact_prefix="$B/artifacts/$t-" "$B/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  secs=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
  cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
  status=ok
  if [ "$rc" != 0 ]; then
    status="FAILED (rc=$rc, log $log)"; fail=1
    grep -E 'ERROR: |SUMMARY: |runtime error|Test unit written' "$log" | head -n 5
  fi
  printf 'fuzz %-12s %ss  execs=%-9s exec/s=%-7s cov=%-6s ft=%-6s %s\n' "$t" "$S" "${execs:-?}" "${secs:-?}" \
    "${cov:-?}" "${ft:-?}" "$status"
done
[ "$fail" = 0 ] || { echo "fuzz: at least one target failed (inputs in $B/artifacts/)"; exit 1; }
echo "fuzz: all targets clean"
