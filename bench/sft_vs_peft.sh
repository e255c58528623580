#!/usr/bin/env bash
# The BBC headline SFT job for N optimizer steps with PyTorch + transformers + PEFT (float32) and
# with afinar (`train --task causal-lm`), in one run: tokens/s, peak RSS, loss after N steps, ratios,
# the CPU named and the load average recorded. See bench/sft_vs_peft.py for what each side runs.
#
# Usage: bench/sft_vs_peft.sh [extra args for `bench/sft_vs_peft.py run`, e.g. --steps 8 --batch 16]
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), VENV (.venv-ref), OUT (bench/results),
#        BUILD (build), HF (the float32 transformers checkpoint; default: MODEL's .hf-f32 sibling if
#        present, else $BUILD/bench/<model>.hf-f32, made once)
# First run: creates $VENV from tests/ref/requirements.txt when missing, converts the GGUF once to a
# float32 transformers checkpoint (bench/train_peft.py prepare, transformers' gguf_file loader),
# exports data/bbc_headlines (scripts/fetch_data.sh) and builds afinar.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
ME=sft_vs_peft
. bench/sft_peft_env.sh
exec "$VPY" bench/sft_vs_peft.py run --hf "$HF" --model "$MODEL" --afinar "$BUILD/afinar" \
    --work "$BUILD/bench/sft_vs_peft" --out "$OUT" "$@"
