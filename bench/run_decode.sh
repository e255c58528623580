#!/usr/bin/env bash
# Prompt-processing and decode tok/s of `afinar generate` vs llama.cpp (llama-cpp-python,
# compiled from source for this CPU) on the same GGUF, same prompt, same threads.
# Writes bench/results/decode.md and bench/results/decode.json. See bench/README.md.
#
# Usage: bench/run_decode.sh [extra args for bench/decode_llamacpp.py]
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), AFINAR (build/afinar),
#        THREADS (2), REPS (3), NGEN (128), PY (python3 used to create .venv-bench),
#        PRIO (-15: nice level of the measurement when allowed; 0 = leave as is),
#        WAIT_IDLE (600: wait up to this many s for load < IDLE_LOAD (0.5) before measuring),
#        LLAMA_VENV (.venv-bench: the venv holding llama-cpp-python), OUT (bench/results),
#        BUILD_LLAMA (1; 0 = never build llama.cpp: without llama-cpp-python in LLAMA_VENV only
#        afinar is measured and the llama.cpp column says "not run"),
#        LLAMA_BENCH (unset; a llama-bench binary, e.g. .llama-server/bin/llama-bench from
#        scripts/setup_llama_server.sh: llama.cpp measured by its own C++ benchmark tool instead of
#        llama-cpp-python, nothing built)
# Prints and records the targets: decode >= 1.5x and prompt >= 2.5x llama.cpp, met or missed.
# First run: creates .venv-bench and builds llama.cpp (scripts/setup_llamacpp.sh with NATIVE=1,
# 10-30 min on 2 cores; log in .venv-bench/llama_build.log). Later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
AFINAR=${AFINAR:-build/afinar}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
NGEN=${NGEN:-128}
PY=${PY:-python3}
VENV=${LLAMA_VENV:-.venv-bench}
VPY=$VENV/bin/python
OUT=${OUT:-bench/results}
LLAMA_ARGS=()

[ -f "$MODEL" ] || { echo "run_decode: $MODEL missing (scripts/fetch_models.sh)" >&2; exit 1; }

# llama-cpp-python with -march=native (the speed comparison needs the native build); the build
# logic is shared with the llama.cpp cross-checks (scripts/setup_llamacpp.sh).
LLAMA_BENCH=${LLAMA_BENCH:-}
if [ -n "$LLAMA_BENCH" ]; then
  # llama.cpp's own llama-bench (scripts/setup_llama_server.sh builds it): no llama-cpp-python needed
  [ -x "$LLAMA_BENCH" ] || { echo "run_decode: LLAMA_BENCH=$LLAMA_BENCH is not an executable" >&2; exit 1; }
  VPY=$PY
  LLAMA_ARGS=(--llama-bench "$LLAMA_BENCH")
elif [ "${BUILD_LLAMA:-1}" = 0 ]; then
  if ! { [ -x "$VPY" ] && "$VPY" -c 'import llama_cpp' 2>/dev/null; }; then
    echo "run_decode: no llama-cpp-python in $VENV and BUILD_LLAMA=0: measuring afinar only" >&2
    VPY=$PY
    LLAMA_ARGS=(--skip-llama)
  fi
else
  NATIVE=1 PY="$PY" bash scripts/setup_llamacpp.sh "$VENV" || { echo "run_decode: llama-cpp-python build failed" >&2; exit 1; }
fi
[ "${#LLAMA_ARGS[@]}" != 0 ] || "$VPY" -c 'import llama_cpp; print("run_decode: llama-cpp-python", llama_cpp.__version__, "|",
  llama_cpp.llama_print_system_info().decode().strip())'

if [ ! -x "$AFINAR" ]; then
  echo "run_decode: $AFINAR not built (make cli): measuring llama.cpp only" >&2
fi
# Raise the priority (needs root / CAP_SYS_NICE) so that other work on the machine (builds,
# tests) disturbs the measurement less; both engines inherit it. PRIO=0 disables.
PRIO=${PRIO:--15}
RUN=()
if [ "$PRIO" != 0 ] && [ "$(nice -n "$PRIO" nice 2>/dev/null)" = "$PRIO" ]; then
  RUN=(nice -n "$PRIO")
elif [ "$PRIO" != 0 ]; then
  echo "run_decode: cannot raise priority (not root): running at normal priority" >&2
fi
echo "run_decode: load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
exec "${RUN[@]}" "$VPY" bench/decode_llamacpp.py --model "$MODEL" --afinar "$AFINAR" \
  --threads "$THREADS" --reps "$REPS" --n-gen "$NGEN" --out "$OUT" \
  --wait-idle "${WAIT_IDLE:-600}" --idle-load "${IDLE_LOAD:-0.5}" ${LLAMA_ARGS[@]+"${LLAMA_ARGS[@]}"} "$@"
