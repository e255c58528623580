#!/usr/bin/env bash
# Prompt and decode tokens/s (`afinar generate --timings`) and training samples/s (`afinar train`,
# classification on BBC News, the run's own samples/s) of SmolLM2-135M on --device cpu and on each
# --device given, one run each, on this machine. Writes bench/results/vulkan-<tag>.md.
# On lavapipe (Mesa's software Vulkan device) this measures a CPU emulation: it proves the path
# runs and says nothing about a GPU. llama.cpp's Vulkan backend is not built here (see the result
# file). See docs/VULKAN.md.
#
# Usage: bench/vulkan.sh [TAG]   (TAG default: lavapipe)
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), AFINAR (build/afinar), DEVICES ("vulkan"),
#        PROMPT_TOKENS (~64: the first words of bench/prompt_128.txt), NGEN (8), STEPS (2),
#        BATCH (2), SEQ (32), THREADS (0 = all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-lavapipe}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
AFINAR=${AFINAR:-build/afinar}
DEVICES=${DEVICES:-vulkan}
NGEN=${NGEN:-8}
STEPS=${STEPS:-2}
BATCH=${BATCH:-2}
SEQ=${SEQ:-32}
THREADS=${THREADS:-0}
WORDS=${WORDS:-48}
OUT=bench/results/vulkan-$TAG.md
[ -f "$MODEL" ] || { echo "bench/vulkan: $MODEL missing (scripts/fetch_models.sh)" >&2; exit 1; }
[ -x "$AFINAR" ] || { echo "bench/vulkan: $AFINAR not built (make)" >&2; exit 1; }
[ -f data/bbc/train.jsonl ] || { echo "bench/vulkan: data/bbc missing (scripts/setup.sh)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
head -c 100000 bench/prompt_128.txt | tr -s ' \n' ' ' | cut -d' ' -f1-"$WORDS" > "$TMP/prompt.txt"
head -n $((STEPS * BATCH)) data/bbc/train.jsonl > "$TMP/train.jsonl"

gen() { # device -> "prompt_tokens prompt_tok/s decode_tok/s"
  "$AFINAR" generate -m "$MODEL" -f "$TMP/prompt.txt" -n "$NGEN" --temp 0 --ignore-eos -t "$THREADS" \
    --device "$1" --timings 2>&1 >/dev/null |
    sed -n 's/^timings: prompt \([0-9]*\) tokens [0-9.]* s (\([0-9.]*\) tok\/s), decode [0-9]* tokens [0-9.]* s (\([0-9.]*\) tok\/s).*/\1 \2 \3/p'
}
train() { # device -> "samples/s wall_s"
  local t0 t1
  t0=$(date +%s.%N)
  "$AFINAR" train -m "$MODEL" --train "$TMP/train.jsonl" --labels data/bbc/labels.txt --recipe fixed \
    --max-steps "$STEPS" --batch "$BATCH" --grad-accum 1 --max-seq-len "$SEQ" --lora-layers top2 --no-plot \
    -t "$THREADS" -o "$TMP/run_$1" --overwrite --device "$1" >/dev/null 2>&1
  t1=$(date +%s.%N)
  local sps
  sps=$(grep '"type":"train"' "$TMP/run_$1/metrics.jsonl" | tail -n 1 | sed 's/.*"samples_per_s":\([0-9.e+-]*\).*/\1/')
  echo "$sps $(printf "%.1f" "$(echo "$t1 - $t0" | bc)")"
}

CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
NCPU=$(nproc)
{
  echo "# Vulkan backend vs CPU backend: SmolLM2-135M-Instruct Q4_1 ($TAG)"
  echo
  echo "Machine: $CPU, $NCPU cores; load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Date: $(date -u +%Y-%m-%dT%H:%MZ); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); one run each."
  "$AFINAR" devices 2>/dev/null | sed 's/^/    /'
  echo
  echo "Generate: a ~$WORDS-word prompt, $NGEN greedy tokens. Train: classification on the first"
  echo "$((STEPS * BATCH)) BBC News articles, $STEPS steps of $BATCH x $SEQ tokens, LoRA q,v on the top 2 layers;"
  echo "samples/s as the run logs it (the last step), wall time of the whole command (load, plan, save)."
  echo
  echo "| device | prompt tokens | prompt tok/s | decode tok/s | train samples/s | train wall s |"
  echo "|---|---|---|---|---|---|"
} > "$OUT.tmp"
for dev in cpu $DEVICES; do
  read -r pt ps ds < <(gen "$dev" || true) || true
  read -r tsps twall < <(train "$dev" || true) || true
  echo "| $dev | ${pt:-?} | ${ps:-?} | ${ds:-?} | ${tsps:-?} | ${twall:-?} |" >> "$OUT.tmp"
  echo "bench/vulkan: $dev done" >&2
done
{
  echo
  echo "Load average after the runs: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "Lavapipe (llvmpipe) is Mesa's software Vulkan device: the shaders run as JIT-compiled code on"
  echo "the same CPU cores, with a large cost per workgroup. Its speed says nothing about the backend"
  echo "on a GPU; no GPU has run it yet. llama.cpp's Vulkan backend was not built for comparison (it"
  echo "needs a from-source build with -DGGML_VULKAN=ON, tens of minutes on 2 cores, and would run on"
  echo "the same software device)."
} >> "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
cat "$OUT"
