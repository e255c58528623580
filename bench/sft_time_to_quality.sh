#!/usr/bin/env bash
# Causal-LM SFT time to quality (issue 34, item 5): PyTorch + PEFT's one epoch against afinar's
# default run with a third of PEFT's time (`--time-budget`), both adapters scored by the same greedy
# generation on the same test prompts. See bench/sft_time_to_quality.py for what each side runs.
#
# Usage: bench/sft_time_to_quality.sh SET [extra args for `bench/sft_time_to_quality.py run`]
#   SET: headlines (the headline job, scripts/sft_job.sh: 960 examples) | lede (data/bbc_lede)
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), VENV (.venv-ref), OUT (bench/results),
#        BUILD (build), HF (the float32 transformers checkpoint, as bench/sft_vs_peft.sh)
# Takes ~15-25 min of PEFT training per set on 2 cores plus a third of that for afinar: run it on a
# quiet machine (the times are the result).
set -euo pipefail
cd "$(dirname "$0")/.."
SET=${1:?usage: bench/sft_time_to_quality.sh headlines|lede [args]}
shift
OUT=${OUT:-bench/results}
ME=sft_time_to_quality
. bench/sft_peft_env.sh
[ -f data/bbc_lede/train.jsonl ] || python3 scripts/export_bbc_headlines.py --task lede
exec "$VPY" bench/sft_time_to_quality.py run --set "$SET" --hf "$HF" --model "$MODEL" --afinar "$BUILD/afinar" \
    --work "$BUILD/bench/sft_ttq" --out "$OUT" "$@"
