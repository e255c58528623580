#!/usr/bin/env bash
# Build llama-cpp-python (llama.cpp compiled from the sdist's bundled source) into a venv.
# Used by bench/run_decode.sh (native build, for speed) and by the llama.cpp cross-checks
# (tests/ref/llamacpp_adapter_check.py, `make check-llamacpp`, CI), which need correctness only.
#
# Usage: scripts/setup_llamacpp.sh VENV_DIR
#   env: NATIVE (0): 1 = -march=native + llamafile sgemm + CPU repack (the benchmark build);
#                    0 = portable x86-64 baseline, and the optional CPU kernels that only add
#                        speed (llamafile sgemm, weight repacking) left out: a shorter build.
#        PY (python3): interpreter used to create the venv.
#        CMAKE_BUILD_PARALLEL_LEVEL (nproc).
# Idempotent: does nothing when `import llama_cpp` already works in VENV_DIR.
# Prints the build's wall time; the pip log is VENV_DIR/llama_build.log.
# Exit status: 0 built (or present), 1 build failed (last lines of the log on stderr).
# Needs cmake, ninja-build and a C/C++ compiler (scripts/setup.sh installs them) and network
# access to PyPI for the sdist (bench/requirements.txt pins the version).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:?usage: scripts/setup_llamacpp.sh VENV_DIR}
NATIVE=${NATIVE:-0}
PY=${PY:-python3}
VPY=$VENV/bin/python

if [ -x "$VPY" ] && ! "$VPY" -m pip --version >/dev/null 2>&1; then
  echo "setup_llamacpp: $VENV has no pip (an interrupted creation?): recreating it"
  rm -rf "$VENV"
fi
if [ ! -x "$VPY" ]; then
  echo "setup_llamacpp: creating $VENV"
  "$PY" -m venv "$VENV"
  "$VPY" -m pip install -q --disable-pip-version-check --upgrade pip
fi
if "$VPY" -c 'import llama_cpp' 2>/dev/null; then
  echo "setup_llamacpp: llama-cpp-python already in $VENV"
  exit 0
fi

LOG=$VENV/llama_build.log
# Only what the Python binding loads: no tests/examples/tools/server, no multimodal (mtmd)
# library (LLAVA_BUILD=OFF). llama-cpp-python forces LLAMA_BUILD_COMMON on.
ARGS="-DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
 -DLLAMA_BUILD_SERVER=OFF -DLLAVA_BUILD=OFF -DGGML_CCACHE=OFF"
if [ "$NATIVE" = 1 ]; then
  ARGS="$ARGS -DGGML_NATIVE=ON"
else
  ARGS="$ARGS -DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF -DGGML_CPU_REPACK=OFF"
fi
export CMAKE_ARGS="$ARGS"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
echo "setup_llamacpp: building llama-cpp-python (NATIVE=$NATIVE, $CMAKE_BUILD_PARALLEL_LEVEL jobs); log: $LOG"
T0=$(date +%s)
# --no-cache-dir: never reuse a wheel built elsewhere with other flags.
if ! "$VPY" -m pip install -v --no-cache-dir --disable-pip-version-check \
      -r bench/requirements.txt > "$LOG" 2>&1; then
  echo "setup_llamacpp: llama-cpp-python build failed after $(( $(date +%s) - T0 )) s; last lines of $LOG:" >&2
  tail -30 "$LOG" >&2
  exit 1
fi
echo "setup_llamacpp: built in $(( $(date +%s) - T0 )) s"
if [ "$NATIVE" = 1 ]; then
  grep -q -- "-march=native" "$LOG" || echo "setup_llamacpp: warning: -march=native not seen in $LOG" >&2
fi
