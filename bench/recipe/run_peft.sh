#!/usr/bin/env bash
# The PyTorch + transformers + PEFT cell of the recipe evaluation (bench/recipe/README.md): train SET
# with bench/recipe/peft_job.py (bench/train_peft.py's model: LoRA q,v on every layer of the float32
# checkpoint made from the same GGUF, mean pooling) at the common recipe (f32, r 16, alpha 32,
# lr 2e-4, batch 16, 1 epoch, max_seq_len 128, warm-up 6% + cosine, clipping 1.0, weight decay
# 0.01), evaluate on the test split, write runs/recipe/SET-RECIPE/cell.json. Runs under `nice -n 5`.
#   bench/recipe/run_peft.sh SET [peft_job.py flags...]
# RECIPE (default peft) names the cell when the flags change the recipe; VENV the reference venv
# (default .venv-ref: tests/ref/requirements.txt); HF the float32 checkpoint (default: the GGUF's
# .hf-f32 sibling, else build/bench/<model>.hf-f32, made once by bench/train_peft.py prepare, as
# bench/train_vs_peft and bench/sft_vs_peft.sh do).
set -euo pipefail
cd "$(dirname "$0")/../.."
SET=$1; shift
RECIPE=${RECIPE:-peft}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
VPY=${VENV:-.venv-ref}/bin/python
HF=${HF:-${MODEL%.gguf}.hf-f32}
[ -f "$HF/model.safetensors" ] || HF=build/bench/$(basename "${MODEL%.gguf}").hf-f32
OUT=runs/recipe/$SET-$RECIPE
[ -x "$VPY" ] || { echo "run_peft: $VPY missing (python3 -m venv .venv-ref; pip install -r tests/ref/requirements.txt)" >&2; exit 1; }
if [ ! -f "$HF/model.safetensors" ]; then
  echo "run_peft: converting $MODEL to a float32 transformers checkpoint in $HF (once)"
  mkdir -p "$(dirname "$HF")"
  nice -n "${NICE:-5}" "$VPY" bench/train_peft.py prepare --gguf "$MODEL" --out "$HF"
fi
mkdir -p "$OUT"
load0=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
nice -n "${NICE:-5}" "$VPY" bench/recipe/peft_job.py --hf "$HF" --set "$SET" --out "$OUT" "$@" \
    > "$OUT/peft_stdout.json" 2> "$OUT/train.log"
t2=$(date +%s.%N)
load1=$(cut -d' ' -f1 /proc/loadavg)
python3 bench/recipe/cell.py peft "$OUT" "$SET" "$RECIPE" "$t0" "$t2" "$t2" "$load0" "$load1" "$*"
