#!/bin/sh
# check_serve_clients.sh — `afinar serve` against real clients (the `openai` Python package in .venv,
# made by scripts/setup.sh from scripts/requirements.txt, and curl) on SmolLM2-135M: run by `make
# test` (tests/serve_clients.py does the checks). Skips, with the reason, when the binary has no
# server (built without libmicrohttpd), the model, curl or the openai package is missing. Bounded:
# at most SERVE_CLIENTS_TIMEOUT seconds (default 1200; with the OpenAI-feature checks and the Gemma 3
# pass the script took 80 s on 2 shared cores, 11 min while the machine was also building). Prints
# the RESULT line run_all.sh sums. The Gemma 3 270M pass is skipped, naming scripts/fetch_models.sh, without its GGUF.
bin=${AFINAR_BIN:-build/afinar}
model=${AF_MODEL_DIR:-models}/SmolLM2-135M-Instruct.Q4_1.gguf
py=.venv/bin/python
skip() { echo "SKIP: $1"; echo "RESULT check_serve_clients passed=0 failed=0 skipped=1"; exit 0; }
[ -x "$bin" ] || skip "AFINAR_BIN not set or not executable (make test sets it)"
# under make sanitize the server's leaks and errors are checked by test_serve (tiny model); the
# clients' checks on SmolLM2 run in make test (an ASan build would take minutes here)
case "${AF_TEST_SANITIZE:-0}" in 0|"") ;; *) skip "sanitizer build: the server is checked by test_serve; the clients run in make test" ;; esac
"$bin" serve --help >/dev/null 2>&1 || skip "afinar serve --help failed"
"$bin" serve -m /nonexistent --port 0 2>&1 | grep -q "not built in" && skip "afinar was built without libmicrohttpd (apt-get install libmicrohttpd-dev)"
[ -f "$model" ] || skip "$model absent (scripts/setup.sh fetches it)"
command -v curl >/dev/null 2>&1 || skip "curl not installed (scripts/setup.sh installs it)"
[ -x "$py" ] && "$py" -c "import openai" 2>/dev/null || skip "$py with the openai package absent (scripts/setup.sh)"
t0=$(date +%s)
gemma=${AF_MODEL_DIR:-models}/gemma-3-270m-Q4_K_M.gguf
timeout "${SERVE_CLIENTS_TIMEOUT:-1200}" "$py" tests/serve_clients.py --afinar "$bin" --model "$model" --threads 2 --gemma "$gemma"
rc=$?
echo "serve clients: $(( $(date +%s) - t0 )) s"
if [ "$rc" = 124 ]; then echo "FAIL: timed out"; echo "RESULT check_serve_clients passed=0 failed=1 skipped=0"; fi
exit $rc
