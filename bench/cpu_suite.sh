#!/usr/bin/env bash
# One benchmark run per CPU kind: this machine's whole table of afinar against its peers, each row
# with its target met or missed, in bench/results/cpu-<slug>.md and .json (slug from /proc/cpuinfo:
# model-name words + Zen generation / Intel microarchitecture + cores, e.g. amd-epyc-zen4-2c).
#
# Usage: bench/cpu_suite.sh
#   e.g.  bench/cpu_suite.sh                          # the full table (about 30-60 min on 2 cores)
#         QUICK=1 bench/cpu_suite.sh                  # smallest settings, a smoke run (a few minutes)
#         SKIP=train,sft bench/cpu_suite.sh           # leave parts out
#   env: QUICK (0), SKIP (comma-separated parts among stream,decode,train,sft,threads),
#        THREADS (all cores: the thread count of every peer comparison), MODEL
#        (models/SmolLM2-135M-Instruct.Q4_1.gguf), BUILD (build), OUT (bench/results), WORK
#        ($BUILD/bench/cpu_suite: the parts' own reports and logs), LLAMA_BENCH (llama.cpp's
#        llama-bench: .llama-server/bin/llama-bench when scripts/setup_llama_server.sh built it, on a
#        CPU with AMX .llama-noamx/bin/llama-bench first (built without ggml's AMX kernel, see below);
#        `none` = use LLAMA_VENV), LLAMA_VENV (the venv with llama-cpp-python, used without
#        LLAMA_BENCH: .venv-bench, else .venv-llamacpp when it exists; never built here),
#        REF_VENV (.venv-ref: torch, transformers, peft, gguf; never created here), HF (the float32
#        transformers checkpoint of MODEL: its .hf-f32 sibling when present, else made once in
#        $BUILD/bench/), WAIT_IDLE (600, QUICK: 0: wait up to this many s for the 1-minute load
#        average to drop below IDLE_LOAD (0.5) before starting), PY (python3)
# Parts, in order (each prints its duration; each runs an existing script with small settings):
#   stream   bench/stream_read.c: read bandwidth, 1 and THREADS threads (the decode floor's denominator)
#   decode   bench/run_decode.sh: prompt and decode tok/s vs llama.cpp (+ `afinar info` for the
#            weight bytes per token)
#   train    bench/train_vs_peft: classification LoRA training vs PyTorch + PEFT, f32 and bf16
#            autocast (bf16 rows only where the CPU has AVX512_BF16/AMX), MFU (bench/peak_flops.c);
#            afinar's int8 frozen products (--frozen-precision int8, AVX512_VNNI) vs PyTorch f32
#   sft      bench/sft_vs_peft.sh: causal-LM SFT tokens/s and peak RSS vs PyTorch + PEFT f32
#   threads  bench/thread_scaling.sh COMPETE=1: 2 threads vs 1 with one competing busy process
# A part whose peer is missing runs afinar alone (decode) or is recorded as not run (train, sft);
# a part that fails is recorded as failed with its log; the run goes on either way. Exit status:
# 0 the report was written, 1 nothing could be measured or the build failed, 2 bad settings.
# Definitions and targets: bench/README.md ("One run per CPU kind"), bench/cpu_suite.py.
set -uo pipefail
cd "$(dirname "$0")/.."
me=cpu_suite
QUICK=${QUICK:-0}
SKIP=${SKIP:-}
THREADS=${THREADS:-$(nproc)}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
BUILD=${BUILD:-build}
OUT=${OUT:-bench/results}
WORK=${WORK:-$BUILD/bench/cpu_suite}
REF_VENV=${REF_VENV:-.venv-ref}
PY=${PY:-python3}
IDLE_LOAD=${IDLE_LOAD:-0.5}
if [ "$QUICK" = 1 ]; then WAIT_IDLE=${WAIT_IDLE:-0}; else WAIT_IDLE=${WAIT_IDLE:-600}; fi
PARTS="stream decode train sft threads"

die() { echo "$me: $*" >&2; exit 2; }
[ "$QUICK" = 0 ] || [ "$QUICK" = 1 ] || die "QUICK=$QUICK: expected 0 or 1"
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "THREADS=$THREADS: expected an integer >= 1"
[[ $WAIT_IDLE =~ ^[0-9]+$ ]] || die "WAIT_IDLE=$WAIT_IDLE: expected seconds (an integer >= 0)"
IFS=',' read -r -a SKIPS <<< "$SKIP"
for s in ${SKIPS[@]+"${SKIPS[@]}"}; do
  [ -n "$s" ] || continue
  [[ " $PARTS " == *" $s "* ]] || die "SKIP=$SKIP: unknown part '$s' (parts: ${PARTS// /,})"
done
skipped() { [[ ",$SKIP," == *",$1,"* ]]; }
[ -f "$MODEL" ] || { echo "$me: model $MODEL missing (scripts/fetch_models.sh, or MODEL=...)" >&2; exit 1; }
command -v "$PY" >/dev/null || { echo "$me: $PY not found (the report needs python3)" >&2; exit 1; }

# llama.cpp's own llama-bench (scripts/setup_llama_server.sh: a native build) when present, else
# llama-cpp-python from LLAMA_VENV; LLAMA_BENCH=none forces the venv
# On a CPU with AMX, a build without ggml's AMX kernel when there is one (.llama-noamx: on the Emerald
# Rapids guest of 2026-11-28 ggml's tinygemm_kernel_amx died with SIGILL on the prompt):
#   EXTRA_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" scripts/setup_llama_server.sh .llama-noamx
if [ -z "${LLAMA_BENCH:-}" ] && grep -qw amx_tile /proc/cpuinfo 2>/dev/null && [ -x .llama-noamx/bin/llama-bench ]; then
  LLAMA_BENCH=.llama-noamx/bin/llama-bench
fi
if [ -z "${LLAMA_BENCH:-}" ] && [ -x .llama-server/bin/llama-bench ]; then LLAMA_BENCH=.llama-server/bin/llama-bench; fi
[ "${LLAMA_BENCH:-}" != none ] || LLAMA_BENCH=
if [ -z "${LLAMA_VENV:-}" ]; then
  LLAMA_VENV=.venv-bench
  [ -d .venv-bench ] || [ ! -d .venv-llamacpp ] || LLAMA_VENV=.venv-llamacpp
fi
if [ -z "${HF:-}" ]; then
  HF=${MODEL%.gguf}.hf-f32
  [ -f "$HF/model.safetensors" ] || HF=$BUILD/bench/$(basename "${MODEL%.gguf}").hf-f32
fi

echo "$me: building afinar and the benchmark programs in $BUILD"
make -s BUILD="$BUILD" -j"$(nproc)" cli lib "$BUILD/bench/stream_read" >/dev/null \
  || { echo "$me: the build failed (make BUILD=$BUILD cli lib $BUILD/bench/stream_read)" >&2; exit 1; }

rm -rf "$WORK"
mkdir -p "$WORK" "$OUT"
: > "$WORK/parts.tsv"
SLUG=$("$PY" bench/cpu_suite.py slug --cores "$(nproc)") || { echo "$me: cannot read the CPU's facts" >&2; exit 1; }
"$PY" bench/cpu_suite.py facts --cores "$(nproc)" > "$WORK/machine.json"
echo "$me: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores: $SLUG;" \
     "$THREADS threads; QUICK=$QUICK${SKIP:+; SKIP=$SKIP}"

. bench/wait_idle.sh
wait_idle "$me" "$IDLE_LOAD" "$WAIT_IDLE"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
DATE_START=$(date -u '+%Y-%m-%d %H:%M UTC')

# record PART STATUS SECONDS NOTE: one line of parts.tsv (tabs and newlines in NOTE become spaces)
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ')" >> "$WORK/parts.tsv"; }

# run_part PART CMD...: runs CMD (its output in WORK/PART.log), records ran / failed with the time
run_part() {
  local part=$1 t0 rc secs; shift
  t0=$(date +%s)
  echo "$me: part $part: $*"
  "$@" > "$WORK/$part.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  if [ "$rc" = 0 ]; then
    record "$part" ran "$secs" "${NOTE:-}"
    echo "$me: part $part: done in ${secs} s"
  else
    record "$part" failed "$secs" "exit status $rc: $(grep -v '^\s*$' "$WORK/$part.log" | tail -1) (log: $WORK/$part.log)"
    echo "$me: part $part: FAILED (exit status $rc) after ${secs} s; last lines of $WORK/$part.log:" >&2
    tail -5 "$WORK/$part.log" >&2
  fi
}
not_run() { record "$1" "$2" 0 "$3"; echo "$me: part $1: $2${3:+: $3}"; }
# the PyTorch peer: torch, transformers, peft; gguf too when the float32 checkpoint is still to be made
ref_ok() {
  local need="import torch, transformers, peft"
  [ -f "$HF/model.safetensors" ] || need="$need, gguf"
  [ -x "$REF_VENV/bin/python" ] && "$REF_VENV/bin/python" -c "$need" 2>/dev/null
}

if [ "$QUICK" = 1 ]; then
  S_PASSES=3 D_REPS=1 D_NGEN=32
  T_SEQ=128 T_STEPS=1 T_BATCH=4 T_TARGETS=qv
  F_ARGS=(--steps 1 --warmup 1 --batch 4)
  H_REPS=1 H_NDECODE=32 H_TRAIN=0
else
  S_PASSES=10 D_REPS=3 D_NGEN=128
  T_SEQ=128,512 T_STEPS=2,1 T_BATCH=16 T_TARGETS=all-linear
  F_ARGS=(--steps 4 --warmup 1 --batch 8)
  H_REPS=3 H_NDECODE=128 H_TRAIN=1
fi

# --- stream ---
if skipped stream; then not_run stream skipped "SKIP"
else
  # shellcheck disable=SC2016
  NOTE="" run_part stream sh -c '"$1" --threads "1,$2" --passes "$3" > "$4"' sh \
    "$BUILD/bench/stream_read" "$THREADS" "$S_PASSES" "$WORK/stream.json"
fi

# --- decode ---
if skipped decode; then not_run decode skipped "SKIP"
else
  "$BUILD/afinar" info "$MODEL" > "$WORK/model_info.txt" 2>&1 || echo "$me: afinar info $MODEL failed" >&2
  LNOTE="llama.cpp: llama-cpp-python in $LLAMA_VENV"
  if [ -n "${LLAMA_BENCH:-}" ]; then LNOTE="llama.cpp: $LLAMA_BENCH"
  elif ! { [ -x "$LLAMA_VENV/bin/python" ] && "$LLAMA_VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; }; then
    LNOTE="peer missing: no llama-cpp-python in $LLAMA_VENV (bench/run_decode.sh builds .venv-bench; LLAMA_VENV=...): afinar only"
  fi
  NOTE=$LNOTE run_part decode env LLAMA_VENV="$LLAMA_VENV" LLAMA_BENCH="${LLAMA_BENCH:-}" BUILD_LLAMA=0 OUT="$WORK/decode" AFINAR="$BUILD/afinar" \
    MODEL="$MODEL" THREADS="$THREADS" REPS="$D_REPS" NGEN="$D_NGEN" WAIT_IDLE=0 PRIO=0 PY="$PY" bash bench/run_decode.sh
fi

# --- train ---
if skipped train; then not_run train skipped "SKIP"
elif ! ref_ok; then not_run train "peer missing" "no torch/transformers/peft (and gguf, to make $HF) in $REF_VENV (REF_VENV=...; bench/train_vs_peft creates it)"
elif [ ! -f data/bbc/train.jsonl ]; then not_run train "data missing" "data/bbc/train.jsonl (scripts/fetch_data.sh)"
else
  NOTE="PyTorch + PEFT from $REF_VENV" run_part train env BUILD="$BUILD" VENV="$REF_VENV" OUT="$WORK/train" \
    MODEL="$MODEL" HF="$HF" THREADS="$THREADS" BATCH="$T_BATCH" WARMUP=1 STEPS="$T_STEPS" SEQ="$T_SEQ" \
    TARGETS="$T_TARGETS" SYSTEMS=afinar-q4,torch-f32,afinar-q4-bf16,afinar-q4-int8,torch-bf16 PROFILE=0 PRIO=0 bash bench/train_vs_peft
fi

# --- sft ---
if skipped sft; then not_run sft skipped "SKIP"
elif ! ref_ok; then not_run sft "peer missing" "no torch/transformers/peft (and gguf, to make $HF) in $REF_VENV (REF_VENV=...)"
elif [ ! -f data/bbc_headlines/train.jsonl ]; then not_run sft "data missing" "data/bbc_headlines/train.jsonl (scripts/fetch_data.sh)"
else
  NOTE="PyTorch + PEFT from $REF_VENV" run_part sft env BUILD="$BUILD" VENV="$REF_VENV" OUT="$WORK/sft" MODEL="$MODEL" \
    HF="$HF" bash bench/sft_vs_peft.sh "${F_ARGS[@]}" --threads "$THREADS"
fi

# --- threads ---
if skipped threads; then not_run threads skipped "SKIP"
elif [ "$(nproc)" -lt 2 ]; then not_run threads "not applicable" "one core: no 2-thread run"
else
  [ -f data/bbc/train.jsonl ] && [ -f data/bbc/labels.txt ] || H_TRAIN=0  # no training rows without the data
  NOTE="one busy-loop competitor" run_part threads env BUILD="$BUILD" MODEL="$MODEL" THREADS="1 2" COMPETE=1 PRIO=0 \
    WAIT_IDLE=0 SLUG=compete OUT="$WORK/threads" WORK="$WORK/threads_work" REPS="$H_REPS" NDECODE="$H_NDECODE" \
    TRAIN="$H_TRAIN" PY="$PY" bash bench/thread_scaling.sh
fi

GIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src include bench 2>/dev/null || GIT="$GIT+dirty"
"$PY" bench/cpu_suite.py report --work "$WORK" --out "$OUT" --cores "$(nproc)" \
  --meta "date_start=$DATE_START" --meta "date_end=$(date -u '+%Y-%m-%d %H:%M UTC')" --meta "git=$GIT" \
  --meta "threads=$THREADS" --meta "quick=$QUICK" --meta "model=$MODEL" --meta "work=$WORK" \
  --meta "load_before=$LOAD_BEFORE" --meta "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" \
  || { echo "$me: no report (see $WORK/*.log)" >&2; exit 1; }
