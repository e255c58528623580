#!/usr/bin/env bash
# Tests of the Python package (python/tests, pytest) and its two examples.
#   scripts/test_python.sh          development loop: the venv .venv-python (made once: numpy, pytest,
#                                   pandas, tqdm from PyPI) and the package from python/ over the built
#                                   $BUILD/libafinar.so (AFINAR_LIBRARY), no reinstall (`make test-python`)
#   scripts/test_python.sh --fresh  what a user does: a new venv, `pip install ./python pytest pandas
#                                   tqdm` (the package's build step compiles the library with `make lib`;
#                                   the install time is printed), pytest and the examples against the
#                                   installed package (.ci/run). AFINAR_BUILD_DIR=$PWD/build lets the
#                                   package's build step reuse the objects `make` just built there
# Prints "RESULT test_python passed=N failed=N skipped=N" and exits non-zero when a test fails or none
# was collected (pytest's exit code 5 counts as a failure: the suite must exist).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
FRESH=0
[ "${1:-}" = "--fresh" ] && FRESH=1
PIP_Q=(-q --disable-pip-version-check)
if [ "$FRESH" = 1 ]; then
  VENV=$(mktemp -d /tmp/afinar-pyvenv-XXXXXX)
  trap 'rm -rf "$VENV"' EXIT
  python3 -m venv "$VENV" || exit 1
  t0=$(date +%s)
  "$VENV/bin/pip" install "${PIP_Q[@]}" ./python pytest pandas tqdm || { echo "test_python: pip install ./python failed"; exit 1; }
  echo "test_python: pip install ./python pytest pandas tqdm took $(( $(date +%s) - t0 )) s"
  unset AFINAR_LIBRARY
  RUN=(env -u PYTHONPATH)
else
  VENV=.venv-python
  if [ ! -x "$VENV/bin/pytest" ]; then
    python3 -m venv "$VENV" && "$VENV/bin/pip" install "${PIP_Q[@]}" numpy pytest pandas tqdm || exit 1
  fi
  RUN=(env AFINAR_LIBRARY="$ROOT/$BUILD/libafinar.so" PYTHONPATH="$ROOT/python")
fi
"${RUN[@]}" "$VENV/bin/python" -c 'import afinar; print("test_python: afinar", afinar.__version__, "library", afinar.LIBRARY_PATH)' || exit 1
# pytest from the repository root (no afinar/ folder there: the package imported is the one above)
"${RUN[@]}" AFINAR_BIN="$ROOT/$BUILD/afinar" "$VENV/bin/pytest" -q -rs -p no:cacheprovider python/tests \
  --junitxml="${TMPDIR:-/tmp}/afinar-pytest-$$.xml"
rc=$?
counts=$(python3 - "${TMPDIR:-/tmp}/afinar-pytest-$$.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    r = ET.parse(sys.argv[1]).getroot()
    s = r if r.tag == "testsuite" else r.find("testsuite")
    n, f, e, k = (int(s.get(x, 0)) for x in ("tests", "failures", "errors", "skipped"))
    print(n - f - e - k, f + e, k)
except Exception:
    print(0, 1, 0)
PY
)
rm -f "${TMPDIR:-/tmp}/afinar-pytest-$$.xml"
read -r passed failed skipped <<<"$counts"
[ "$rc" = 5 ] && { echo "test_python: pytest collected no test"; failed=$((failed + 1)); }
[ "$rc" != 0 ] && [ "$failed" = 0 ] && failed=1
# the examples on a tiny budget (2 steps, short sequences), when the model is there
if [ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
  ex_dir=$(mktemp -d /tmp/afinar-examples-XXXXXX)
  for ex in classify_dataframe chat_sft; do
    if "${RUN[@]}" "$VENV/bin/python" examples/$ex.py --max-steps 2 --max-seq-len 48 --threads 2 --out "$ex_dir/$ex" \
         >"$ex_dir/$ex.log" 2>&1; then
      passed=$((passed + 1)); echo "test_python: examples/$ex.py ok"
    else
      failed=$((failed + 1)); echo "test_python: examples/$ex.py FAILED:"; tail -20 "$ex_dir/$ex.log"
    fi
  done
  rm -rf "$ex_dir"
else
  skipped=$((skipped + 2)); echo "SKIP: examples: models/SmolLM2-135M-Instruct.Q4_1.gguf missing (run scripts/setup.sh)"
fi
echo "RESULT test_python passed=$passed failed=$failed skipped=$skipped"
[ "$failed" = 0 ]
