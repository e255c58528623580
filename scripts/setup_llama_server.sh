#!/usr/bin/env bash
# Build llama.cpp's own HTTP server (`llama-server`, C++: continuous batching over --parallel slots,
# LoRA adapters per request) and its benchmark tool (`llama-bench`) from the llama.cpp source bundled in the llama-cpp-python sdist that
# bench/requirements.txt pins — the same llama.cpp version as bench/run_decode.sh's peer, taken from
# the package registry (no git, no network beyond PyPI).
# Used by bench/serve_vs_llamacpp.sh as the serving peer, and by bench/run_decode.sh /
# bench/cpu_suite.sh (LLAMA_BENCH) as the prompt/decode peer without Python around it.
#
# Usage: scripts/setup_llama_server.sh [DIR]     (default DIR: .llama-server, ignored by git)
#   env: NATIVE (1): 1 = -march=native (the benchmark build), 0 = portable x86-64 baseline.
#        PY (python3): interpreter whose pip downloads the sdist.
#        CMAKE_BUILD_PARALLEL_LEVEL (nproc).
#        EXTRA_FLAGS (empty): C/C++ flags added to the build, e.g. on an Intel Xeon with AMX whose
#        guest kernel raises SIGILL in ggml's AMX kernel ("-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";
#        an explicit -mno-* wins over -march=native in GCC); use a DIR of its own for such a build.
# Result: DIR/bin/llama-server and DIR/bin/llama-bench (the build tree, with its CMakeCache.txt,
# stays in DIR/build). Idempotent: does nothing when both run; the source is unpacked once and
# the build tree reused, so adding a target builds only what is missing.
# Prints the build's wall time; the build log is DIR/build.log.
# Exit status: 0 built (or present), 1 download or build failed (last lines of the log on stderr).
# Needs cmake, ninja-build and a C/C++ compiler (scripts/setup.sh installs them); 5-20 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.llama-server}
NATIVE=${NATIVE:-1}
PY=${PY:-python3}
BIN=$DIR/bin/llama-server
BENCH=$DIR/bin/llama-bench
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1 && [ -x "$BENCH" ] && "$BENCH" --help >/dev/null 2>&1; then
  echo "setup_llama_server: $BIN and $BENCH already built"
  exit 0
fi
VER=$(sed -n 's/^llama-cpp-python==\([0-9.]*\).*/\1/p' bench/requirements.txt)
[ -n "$VER" ] || { echo "setup_llama_server: no llama-cpp-python pin in bench/requirements.txt" >&2; exit 1; }
mkdir -p "$DIR/dl" "$DIR/bin"
LOG=$DIR/build.log
: >"$LOG"
fail() { echo "setup_llama_server: $1 (log: $LOG)" >&2; tail -n 30 "$LOG" >&2; exit 1; }
SRC=$DIR/src
ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_OPENMP=ON -DLLAMA_CURL=OFF
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
      -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CCACHE=OFF)
if [ "$NATIVE" = 1 ]; then ARGS+=(-DGGML_NATIVE=ON); else ARGS+=(-DGGML_NATIVE=OFF); fi
EXTRA_FLAGS=${EXTRA_FLAGS:-}
if [ -n "$EXTRA_FLAGS" ]; then ARGS+=("-DCMAKE_C_FLAGS=$EXTRA_FLAGS" "-DCMAKE_CXX_FLAGS=$EXTRA_FLAGS"); fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
t0=$(date +%s)
if [ ! -f "$SRC/CMakeLists.txt" ]; then # the llama.cpp source, unpacked once
SDIST=$(ls "$DIR"/dl/llama_cpp_python-"$VER".tar.gz 2>/dev/null || true)
if [ -z "$SDIST" ]; then
  echo "setup_llama_server: downloading the llama-cpp-python $VER sdist (llama.cpp source)"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    "llama-cpp-python==$VER" -d "$DIR/dl" >>"$LOG" 2>&1 || fail "pip download failed"
  SDIST=$(ls "$DIR"/dl/llama_cpp_python-"$VER".tar.gz)
fi
rm -rf "$SRC" && mkdir -p "$SRC"
tar -xzf "$SDIST" -C "$SRC" --strip-components=3 "llama_cpp_python-$VER/vendor/llama.cpp" >>"$LOG" 2>&1 ||
  fail "the sdist has no vendor/llama.cpp"
fi
cmake -S "$SRC" -B "$DIR/build" "${ARGS[@]}" >>"$LOG" 2>&1 || fail "cmake configure failed"
echo "setup_llama_server: building llama-server and llama-bench (NATIVE=$NATIVE${EXTRA_FLAGS:+, $EXTRA_FLAGS}, $CMAKE_BUILD_PARALLEL_LEVEL jobs); log: $LOG"
cmake --build "$DIR/build" --target llama-server llama-bench >>"$LOG" 2>&1 || fail "build failed"
cp "$DIR/build/bin/llama-server" "$BIN"
cp "$DIR/build/bin/llama-bench" "$BENCH"
"$BIN" --version >>"$LOG" 2>&1 || fail "the built llama-server does not run"
"$BENCH" --help >>"$LOG" 2>&1 || fail "the built llama-bench does not run"
echo "setup_llama_server: built $BIN and $BENCH in $(($(date +%s) - t0)) s"
