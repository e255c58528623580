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
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
VENV=${VENV:-.venv-ref}
OUT=${OUT:-bench/results}
BUILD=${BUILD:-build}
VPY=$VENV/bin/python
# the float32 checkpoint: bench/train_vs_peft's (next to the GGUF) when it exists, else one made in $BUILD
HF=${HF:-${MODEL%.gguf}.hf-f32}
[ -f "$HF/model.safetensors" ] || HF=$BUILD/bench/$(basename "${MODEL%.gguf}").hf-f32

[ -f "$MODEL" ] || { echo "sft_vs_peft: $MODEL missing (scripts/fetch_models.sh)" >&2; exit 1; }
# gguf (transformers' GGUF loader) only for making the float32 checkpoint once
NEED="import torch, transformers, peft"
[ -f "$HF/model.safetensors" ] || NEED="$NEED, gguf"
if ! { [ -x "$VPY" ] && "$VPY" -c "$NEED" 2>/dev/null; }; then
  echo "sft_vs_peft: creating $VENV from tests/ref/requirements.txt (torch, transformers, peft, gguf)"
  [ -x "$VPY" ] || python3 -m venv "$VENV"
  "$VPY" -m pip install -q --disable-pip-version-check -r tests/ref/requirements.txt
fi
[ -f data/bbc_headlines/train.jsonl ] || scripts/fetch_data.sh
[ -x "$BUILD/afinar" ] || make BUILD="$BUILD" -j2 cli
if [ ! -f "$HF/model.safetensors" ]; then
  echo "sft_vs_peft: converting $MODEL to a float32 transformers checkpoint in $HF (once)"
  mkdir -p "$(dirname "$HF")"
  "$VPY" bench/train_peft.py prepare --gguf "$MODEL" --out "$HF"
fi
exec "$VPY" bench/sft_vs_peft.py run --hf "$HF" --model "$MODEL" --afinar "$BUILD/afinar" \
    --work "$BUILD/bench/sft_vs_peft" --out "$OUT" "$@"
