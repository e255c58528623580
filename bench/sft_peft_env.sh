# Sourced by bench/sft_vs_peft.sh and bench/sft_time_to_quality.sh (repository root, `set -eu`, ME =
# the caller's name for messages): the PyTorch + PEFT side's environment, made once.
#   in:  MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), VENV (.venv-ref), BUILD (build), HF (optional)
#   out: MODEL, VENV, BUILD, VPY (the venv's python), HF (the float32 transformers checkpoint: MODEL's
#        .hf-f32 sibling when bench/train_vs_peft made one, else $BUILD/bench/<model>.hf-f32)
# Creates VENV from tests/ref/requirements.txt when torch/transformers/peft are missing (gguf too while
# the checkpoint is to be made), exports data/bbc_headlines (scripts/fetch_data.sh), builds afinar,
# and converts the GGUF once (bench/train_peft.py prepare, transformers' gguf_file loader).
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
VENV=${VENV:-.venv-ref}
BUILD=${BUILD:-build}
VPY=$VENV/bin/python
HF=${HF:-${MODEL%.gguf}.hf-f32}
[ -f "$HF/model.safetensors" ] || HF=$BUILD/bench/$(basename "${MODEL%.gguf}").hf-f32
[ -f "$MODEL" ] || { echo "$ME: $MODEL missing (scripts/fetch_models.sh)" >&2; exit 1; }
NEED="import torch, transformers, peft"
[ -f "$HF/model.safetensors" ] || NEED="$NEED, gguf"
if ! { [ -x "$VPY" ] && "$VPY" -c "$NEED" 2>/dev/null; }; then
  echo "$ME: creating $VENV from tests/ref/requirements.txt (torch, transformers, peft, gguf)"
  [ -x "$VPY" ] || python3 -m venv "$VENV"
  "$VPY" -m pip install -q --disable-pip-version-check -r tests/ref/requirements.txt
fi
[ -f data/bbc_headlines/train.jsonl ] || scripts/fetch_data.sh
[ -x "$BUILD/afinar" ] || make BUILD="$BUILD" -j2 cli
if [ ! -f "$HF/model.safetensors" ]; then
  echo "$ME: converting $MODEL to a float32 transformers checkpoint in $HF (once)"
  mkdir -p "$(dirname "$HF")"
  "$VPY" bench/train_peft.py prepare --gguf "$MODEL" --out "$HF"
fi
