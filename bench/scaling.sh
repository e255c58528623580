#!/usr/bin/env bash
# How cost grows with the model: load time, peak RSS and tokens/s of decode, classification LoRA
# training and causal-LM LoRA SFT at 512 tokens (with and without --checkpointing) on random-weight
# Q4_K llama GGUFs of the Llama-3.2-1B, Llama-3.2-3B and Llama-3.1-8B shapes, against their
# quantized bytes and FLOPs per token; prints each of the issue's targets met / missed.
# Writes bench/results/scaling-<cpu>.{md,json} (merged: a later run adds or replaces cells).
# See bench/scaling.py for what each cell runs and how each figure is defined.
#
# Usage: bench/scaling.sh [args for `bench/scaling.py run`, e.g. --sizes 1b,3b --steps 2]
#   env: AFINAR (build/afinar). First run: makes the models (scripts/make_scale_models.sh, venv
#   .venv-scale; ~0.6 + 1.7 + 4.2 GB in models/scale/), the data (scripts/fetch_data.sh) and afinar.
# Cost on 2 cores: 1B ~10 min, 3B ~30 min, 8B more than an hour (an 8B SFT step at 512 tokens takes
# minutes); children run under `nice -n 10` and are killed above 12 GiB of RSS (--rss-limit-gib).
set -euo pipefail
cd "$(dirname "$0")/.."
AFINAR=${AFINAR:-build/afinar}
sizes=1b,3b,8b
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --sizes) sizes=${args[i + 1]:-$sizes} ;;
    --sizes=*) sizes=${args[i]#--sizes=} ;;
  esac
done
missing=()
for s in ${sizes//,/ }; do
  [ -f "models/scale/llama-$s-random-Q4_K.gguf" ] || missing+=("$s")
done
if [ ${#missing[@]} -gt 0 ]; then
  scripts/make_scale_models.sh --sizes "$(IFS=,; echo "${missing[*]}")"
fi
{ [ -f data/bbc/train.jsonl ] && [ -f data/bbc_headlines/train.jsonl ]; } || scripts/fetch_data.sh
[ -x "$AFINAR" ] || make -j2 cli
echo "scaling: load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
exec python3 bench/scaling.py run --afinar "$AFINAR" "$@"
