#!/bin/sh
# check_web_ui.sh — the web page of `afinar serve` in headless Chromium (tests/web_ui.py, selenium from
# .venv, chromium + chromium-driver from Debian: scripts/setup.sh installs them). Run by `make test`;
# skips with the reason when the binary has no server, the model, Chromium, chromedriver or selenium is
# missing, or under the sanitizer build. Screenshots of each view: build/web-ui/*.png. Bounded by
# WEB_UI_TIMEOUT seconds (default 1200). Prints the RESULT line run_all.sh sums.
bin=${AFINAR_BIN:-build/afinar}
model=${AF_MODEL_DIR:-models}/SmolLM2-135M-Instruct.Q4_1.gguf
py=.venv/bin/python
skip() { echo "SKIP: $1"; echo "RESULT check_web_ui passed=0 failed=0 skipped=1"; exit 0; }
[ -x "$bin" ] || skip "AFINAR_BIN not set or not executable (make test sets it)"
case "${AF_TEST_SANITIZE:-0}" in 0|"") ;; *) skip "sanitizer build: the web routes are checked by test_serve" ;; esac
"$bin" serve -m /nonexistent --port 0 2>&1 | grep -q "not built in" && skip "afinar was built without libmicrohttpd"
[ -f "$model" ] || skip "$model absent (scripts/setup.sh fetches it)"
[ -f data/bbc/train.jsonl ] || skip "data/bbc absent (scripts/setup.sh fetches it)"
command -v chromium >/dev/null 2>&1 || skip "chromium not installed (scripts/setup.sh installs it)"
command -v chromedriver >/dev/null 2>&1 || skip "chromedriver not installed (scripts/setup.sh installs chromium-driver)"
[ -x "$py" ] && "$py" -c "import selenium" 2>/dev/null || skip "$py with the selenium package absent (scripts/setup.sh)"
t0=$(date +%s)
timeout "${WEB_UI_TIMEOUT:-1200}" "$py" tests/web_ui.py --afinar "$bin" --model "$model" --shots build/web-ui
rc=$?
echo "web ui: $(( $(date +%s) - t0 )) s"
if [ "$rc" = 124 ]; then echo "FAIL: timed out"; echo "RESULT check_web_ui passed=0 failed=1 skipped=0"; fi
exit $rc
