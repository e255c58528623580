#!/usr/bin/env bash
# Thread scaling of afinar: prompt and decode tok/s of `afinar generate` and LoRA
# training samples/s of bench_train, at 1, 2, ... up to all cores, on this machine, in the default
# environment (no OMP_* variable is set by this script), with the CPU model, family/model, core
# count, cache sizes and the kernel path afinar chose recorded.
#
# Usage: bench/thread_scaling.sh
#   e.g.  bench/thread_scaling.sh                                  # full run, results in bench/results/
#         THREADS="1 2 4 8" REPS=5 bench/thread_scaling.sh
#         THREADS="1 2" REPS=1 NDECODE=16 TRAIN=0 WAIT_IDLE=0 OUT=/tmp/ts bench/thread_scaling.sh   # smoke test
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), BUILD (build: needs $BUILD/afinar, and
#        $BUILD/libafinar.a for training: `make cli lib`), THREADS (1 2 ... nproc), REPS (3: generate
#        repetitions, interleaved across thread counts, order reversed every other one; medians),
#        NDECODE (128 greedy tokens, --ignore-eos), PROMPT_FILE (default: a fixed plain-text prompt of
#        128 SmolLM2 tokens, the one of bench/run_decode.sh),
#        TRAIN (1; 0 skips training), TRAIN_REPS (1), TRAIN_BATCH (16), TRAIN_WARMUP (1), TRAIN_STEPS (2),
#        TRAIN_SEQ (128), TRAIN_N (64 samples), TRAIN_TARGETS (qv),
#        GEN_ARGS / TRAIN_ARGS (extra arguments for every generate / bench_train train run, e.g.
#        GEN_ARGS="--poll 0" for an A/B of the pool's waiting policy; recorded in the report),
#        OUT (bench/results), WORK ($BUILD/bench/thread_scaling: per-run stdout/stderr/times),
#        SLUG (file name threads-SLUG instead of the CPU slug), PRIO (-15: nice level when allowed, 0 = leave),
#        WAIT_IDLE (300: wait up to this many s for the 1-min load average < IDLE_LOAD (0.5)), PY (python3),
#        COMPETE (0: after the idle wait, start this many busy-loop processes at the runs' own priority
#        for the whole measurement — the "one competing process" case: COMPETE=1 PRIO=0; recorded)
# Writes OUT/threads-<cpu-slug>.md (table: threads | prompt tok/s | decode tok/s | CPU share |
# train samples/s | train CPU share | speedups vs 1 thread, the verdict "two threads are never
# slower than one" per phase, throughput drops, whether greedy outputs agree across thread counts)
# and OUT/threads-<cpu-slug>.json (machine facts, every run, medians); prints the table.
# cpu-slug = model-name words + AMD microarchitecture (family 25 = Zen 3/4 by model, 26 = Zen 5)
# + core count, e.g. threads-amd-epyc-zen3-2c.md. Nothing else may run meanwhile: on a busy
# machine threads that wait for a descheduled partner collapse; the report warns when the load
# was >= IDLE_LOAD at the start. Duration with the defaults: about 1 minute on 2 idle cores (one
# generate run per thread count and repetition, one training run per thread count).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
BUILD=${BUILD:-build}
NCPU=$(nproc)
THREADS=${THREADS:-$(seq -s ' ' 1 "$NCPU")}
REPS=${REPS:-3}
NDECODE=${NDECODE:-128}
TRAIN=${TRAIN:-1}
TRAIN_REPS=${TRAIN_REPS:-1}
TRAIN_BATCH=${TRAIN_BATCH:-16}
TRAIN_WARMUP=${TRAIN_WARMUP:-1}
TRAIN_STEPS=${TRAIN_STEPS:-2}
TRAIN_SEQ=${TRAIN_SEQ:-128}
TRAIN_N=${TRAIN_N:-64}
TRAIN_TARGETS=${TRAIN_TARGETS:-qv}
GEN_ARGS=${GEN_ARGS:-}
TRAIN_ARGS=${TRAIN_ARGS:-}
OUT=${OUT:-bench/results}
COMPETE=${COMPETE:-0}
WORK=${WORK:-$BUILD/bench/thread_scaling}
PRIO=${PRIO:--15}
WAIT_IDLE=${WAIT_IDLE:-300}
IDLE_LOAD=${IDLE_LOAD:-0.5}
PY=${PY:-python3}
AFINAR=$BUILD/afinar
BT=$BUILD/bench/bench_train
me=thread_scaling

die() { echo "$me: $*" >&2; exit 1; }
isint() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge "${2:-1}" ]; }

# --- checks ---------------------------------------------------------------------------------
[ -f "$MODEL" ] || die "model $MODEL missing (scripts/fetch_models.sh, or MODEL=...)"
[ -x "$AFINAR" ] || die "$AFINAR not built (make BUILD=$BUILD cli)"
command -v "$PY" >/dev/null || die "$PY not found (the report needs python3)"
for v in REPS NDECODE TRAIN_REPS TRAIN_BATCH TRAIN_STEPS TRAIN_SEQ TRAIN_N; do
  isint "${!v}" || die "$v=${!v}: expected an integer >= 1"
done
isint "$TRAIN_WARMUP" 0 || die "TRAIN_WARMUP=$TRAIN_WARMUP: expected an integer >= 0"
isint "$COMPETE" 0 || die "COMPETE=$COMPETE: expected an integer >= 0"
[ "$TRAIN" = 0 ] || [ "$TRAIN" = 1 ] || die "TRAIN=$TRAIN: expected 0 or 1"
read -r -a TLIST <<< "$THREADS"
[ "${#TLIST[@]}" -ge 1 ] || die "THREADS is empty"
for t in "${TLIST[@]}"; do
  isint "$t" || die "THREADS=\"$THREADS\": expected thread counts >= 1"
  [ "$t" -le "$NCPU" ] || echo "$me: warning: $t threads > $NCPU cores: oversubscribed" >&2
done
if stale=$(find src include -name '*.[ch]' -newer "$AFINAR" 2>/dev/null | head -1) && [ -n "$stale" ]; then
  echo "$me: warning: $stale is newer than $AFINAR: rebuild (make BUILD=$BUILD cli lib) to measure the current code" >&2
fi
if [ "$TRAIN" = 1 ]; then
  [ -f "$BUILD/libafinar.a" ] || die "$BUILD/libafinar.a not built (make BUILD=$BUILD lib), or TRAIN=0"
  for f in data/bbc/train.jsonl data/bbc/labels.txt; do [ -f "$f" ] || die "$f missing (needed for training), or TRAIN=0"; done
  mkdir -p "$BUILD/bench"
  CFLAGS="-std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude -Isrc"
  LIBS="$BUILD/libafinar.a $(make -s print-ldlibs)"
  # shellcheck disable=SC2086
  gcc $CFLAGS bench/bench_train.c -o "$BT" $LIBS || die "compiling bench/bench_train.c failed"
fi

rm -rf "$WORK"
mkdir -p "$WORK/runs" "$OUT"
: > "$WORK/index.tsv"

# --- machine facts and environment ----------------------------------------------------------
"$AFINAR" version > "$WORK/version.txt" 2>&1 || die "$AFINAR version failed: $(cat "$WORK/version.txt")"
lscpu > "$WORK/lscpu.txt" 2>/dev/null || : > "$WORK/lscpu.txt"
env | grep -E '^(OMP_|GOMP_|KMP_)' | sort > "$WORK/omp_env.txt" || true
if [ -s "$WORK/omp_env.txt" ]; then
  echo "$me: warning: OpenMP variables are set, this is not the default environment: $(tr '\n' ' ' < "$WORK/omp_env.txt")" >&2
fi
GIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src include 2>/dev/null || GIT="$GIT+dirty"

if [ -n "${PROMPT_FILE:-}" ]; then
  [ -f "$PROMPT_FILE" ] || die "PROMPT_FILE=$PROMPT_FILE missing"
  cp "$PROMPT_FILE" "$WORK/prompt.txt"
else
  # bench/prompt_128.txt (also read by decode_llamacpp.py): 128 SmolLM2 tokens, plain prose (no chat template).
  cp bench/prompt_128.txt "$WORK/prompt.txt"
fi

RUN=()
PRIO_NOTE="normal priority"
if [ "$PRIO" != 0 ] && [ "$(nice -n "$PRIO" nice 2>/dev/null)" = "$PRIO" ]; then
  RUN=(nice -n "$PRIO"); PRIO_NOTE="nice $PRIO"
elif [ "$PRIO" != 0 ]; then
  echo "$me: cannot set nice $PRIO (not root): running at normal priority" >&2
fi

. bench/wait_idle.sh
wait_idle "$me" "$IDLE_LOAD" "$WAIT_IDLE"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
DATE_START=$(date -u '+%Y-%m-%d %H:%M UTC')
echo "$me: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $NCPU cores;" \
     "$(tr '\n' ' ' < "$WORK/version.txt")"
echo "$me: load average before: $LOAD_BEFORE; threads: ${TLIST[*]}; $PRIO_NOTE"
CPIDS=()
stop_competitors() { [ "${#CPIDS[@]}" = 0 ] || kill "${CPIDS[@]}" 2>/dev/null || true; }
trap stop_competitors EXIT
for ((i = 0; i < COMPETE; i++)); do
  ${RUN[@]+"${RUN[@]}"} sh -c 'while :; do :; done' &
  CPIDS+=($!)
done
[ "$COMPETE" = 0 ] || echo "$me: $COMPETE competing busy-loop process(es) running ($PRIO_NOTE)"

# run_timed PHASE T REP CMD...: runs CMD with stdout/stderr/bash-time files, records it in index.tsv
run_timed() {
  local phase=$1 t=$2 rep=$3; shift 3
  local p="$WORK/runs/$phase-t$t-r$rep" TIMEFORMAT='%3R %3U %3S'
  if ! { time ${RUN[@]+"${RUN[@]}"} "$@" > "$p.out" 2> "$p.err" ; } 2> "$p.time"; then
    echo "$me: failed ($phase, $t threads): $*" >&2
    tail -20 "$p.err" >&2
    exit 1
  fi
  [ "$rep" = 0 ] || printf '%s\t%s\t%s\t%s\n' "$phase" "$t" "$rep" "$p" >> "$WORK/index.tsv"
}

# shellcheck disable=SC2086
gen() { run_timed generate "$1" "$2" "$AFINAR" generate -m "$MODEL" -f "$WORK/prompt.txt" -n "$NDECODE" \
          --temp 0 --ignore-eos -t "$1" --timings $GEN_ARGS; }

# --- prompt + decode --------------------------------------------------------------------------
TMAX=${TLIST[0]}; for t in "${TLIST[@]}"; do [ "$t" -gt "$TMAX" ] && TMAX=$t; done
gen "$TMAX" 0   # untimed warm-up (page cache)
for rep in $(seq 1 "$REPS"); do
  order=("${TLIST[@]}")
  if [ $((rep % 2)) = 0 ]; then order=(); for ((i = ${#TLIST[@]} - 1; i >= 0; i--)); do order+=("${TLIST[i]}"); done; fi
  for t in "${order[@]}"; do
    gen "$t" "$rep"
    echo "$me: generate rep $rep/$REPS, $t threads: $(grep -o 'timings:.*' "$WORK/runs/generate-t$t-r$rep.err" | tail -1)" \
         "| wall/user/sys $(cat "$WORK/runs/generate-t$t-r$rep.time")"
  done
done

# --- training -----------------------------------------------------------------------------------
if [ "$TRAIN" = 1 ]; then
  "$BT" tokens --model "$MODEL" --data data/bbc/train.jsonl --labels data/bbc/labels.txt \
    --max-seq-len "$TRAIN_SEQ" --n "$TRAIN_N" --out "$WORK/tokens.txt" > "$WORK/tokens.json" \
    || die "bench_train tokens failed"
  for rep in $(seq 1 "$TRAIN_REPS"); do
    order=("${TLIST[@]}")
    if [ $((rep % 2)) = 0 ]; then order=(); for ((i = ${#TLIST[@]} - 1; i >= 0; i--)); do order+=("${TLIST[i]}"); done; fi
    for t in "${order[@]}"; do
      # shellcheck disable=SC2086
      run_timed train "$t" "$rep" "$BT" train --model "$MODEL" --tokens "$WORK/tokens.txt" --targets "$TRAIN_TARGETS" \
        --batch "$TRAIN_BATCH" --warmup "$TRAIN_WARMUP" --steps "$TRAIN_STEPS" --threads "$t" $TRAIN_ARGS
      echo "$me: train rep $rep/$TRAIN_REPS, $t threads:" \
           "$(grep -o '"samples_per_s": [0-9.]*' "$WORK/runs/train-t$t-r$rep.out")" \
           "| wall/user/sys $(cat "$WORK/runs/train-t$t-r$rep.time")"
    done
  done
fi

stop_competitors
CPIDS=()
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
DATE_END=$(date -u '+%Y-%m-%d %H:%M UTC')
"$PY" bench/thread_scaling.py report --work "$WORK" --out "$OUT" --slug "${SLUG:-}" \
  --meta "date_start=$DATE_START" --meta "date_end=$DATE_END" --meta "git=$GIT" --meta "nproc=$NCPU" \
  --meta "model=$MODEL" --meta "build=$BUILD" --meta "reps=$REPS" --meta "ndecode=$NDECODE" \
  --meta "threads=${TLIST[*]}" --meta "gen_args=$GEN_ARGS" --meta "train=$TRAIN" \
  --meta "train_reps=$TRAIN_REPS" --meta "train_batch=$TRAIN_BATCH" --meta "train_warmup=$TRAIN_WARMUP" \
  --meta "train_steps=$TRAIN_STEPS" --meta "train_seq=$TRAIN_SEQ" --meta "train_n=$TRAIN_N" \
  --meta "train_targets=$TRAIN_TARGETS" --meta "train_args=$TRAIN_ARGS" \
  --meta "load_before=$LOAD_BEFORE" --meta "load_after=$LOAD_AFTER" --meta "idle_load=$IDLE_LOAD" \
  --meta "prio=$PRIO_NOTE$([ "$COMPETE" = 0 ] || echo "; $COMPETE competing busy-loop process(es) during the runs")"
