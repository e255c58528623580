#!/bin/sh
# check_serve_load.sh — `afinar serve` answers /health and new requests within 1 s while 1,000 idle
# and 50 slow (one byte per second) connections are open, and sheds with HTTP 503 above its
# connection cap (tests/serve_load.py does the checks; Python's standard library only, loopback
# only). Run by `make test`. Skips, with the reason, when the binary has no server, the model or
# python3 is missing. Bounded: at most SERVE_LOAD_TIMEOUT seconds (default 300). Prints the RESULT
# line run_all.sh sums.
bin=${AFINAR_BIN:-build/afinar}
model=${AF_MODEL_DIR:-models}/SmolLM2-135M-Instruct.Q4_1.gguf
skip() { echo "SKIP: $1"; echo "RESULT check_serve_load passed=0 failed=0 skipped=1"; exit 0; }
[ -x "$bin" ] || skip "AFINAR_BIN not set or not executable (make test sets it)"
case "${AF_TEST_SANITIZE:-0}" in 0|"") ;; *) skip "sanitizer build: the server is checked by test_serve" ;; esac
"$bin" serve -m /nonexistent --port 0 2>&1 | grep -q "not built in" && skip "afinar was built without libmicrohttpd (apt-get install libmicrohttpd-dev)"
[ -f "$model" ] || skip "$model absent (scripts/setup.sh fetches it)"
command -v python3 >/dev/null 2>&1 || skip "python3 not installed"
t0=$(date +%s)
timeout "${SERVE_LOAD_TIMEOUT:-300}" python3 tests/serve_load.py --afinar "$bin" --model "$model"
rc=$?
echo "serve load: $(( $(date +%s) - t0 )) s"
if [ "$rc" = 124 ]; then echo "FAIL: timed out"; echo "RESULT check_serve_load passed=0 failed=1 skipped=0"; fi
exit $rc
