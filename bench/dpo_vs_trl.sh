#!/usr/bin/env bash
# The DPO stage of scripts/dpo_job.sh with TRL's DPOTrainer (PyTorch, float32, CPU), side by side
# with afinar's run of the same stage: held-out reward accuracy, ROUGE-L of greedy headlines before
# and after DPO, wall time and peak RSS (/usr/bin/time -v), the CPU and the load average.
#
# Usage: bench/dpo_vs_trl.sh [RUN_DIR]   (default runs/dpo_headlines)
#   RUN_DIR: a finished scripts/dpo_job.sh run (its merged SFT model, pairs, afinar's DPO metrics,
#   generations and dpo_time.txt). env: VENV (.venv-ref: torch, transformers, peft, trl, datasets),
#   OUT (bench/results/dpo_vs_trl.md), THREADS (2), WORK (build/bench/dpo_vs_trl).
# The q8_0 merged GGUF is converted once to a float32 transformers checkpoint in WORK
# (bench/train_peft.py prepare, transformers' gguf_file loader). When VENV lacks the `gguf`
# package that loader needs, it is installed with pip into WORK/pydeps (no dependencies; VENV
# itself is left unchanged).
set -euo pipefail
cd "$(dirname "$0")/.."
JOB=${1:-runs/dpo_headlines}
VENV=${VENV:-.venv-ref}
OUT=${OUT:-bench/results/dpo_vs_trl.md}
THREADS=${THREADS:-2}
WORK=${WORK:-build/bench/dpo_vs_trl}
VPY=$VENV/bin/python
for f in sft_merged.gguf pref/train.jsonl pref/test.jsonl dpo/run.json dpo/metrics.jsonl gen_sft.json gen_dpo.json dpo_time.txt; do
  [ -f "$JOB/$f" ] || { echo "dpo_vs_trl: $JOB/$f missing (run scripts/dpo_job.sh $JOB first)" >&2; exit 1; }
done
"$VPY" -c 'import torch, transformers, peft, trl, datasets' ||
  { echo "dpo_vs_trl: $VENV lacks torch/transformers/peft/trl/datasets" >&2; exit 1; }
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
export PYTHONPATH="$WORK/pydeps${PYTHONPATH:+:$PYTHONPATH}"
"$VPY" -c 'import gguf' 2>/dev/null ||
  "$VPY" -m pip install -q --disable-pip-version-check --no-deps --target "$WORK/pydeps" gguf
HF=$WORK/sft_merged.hf-f32
if [ ! -f "$HF/model.safetensors" ] || [ "$JOB/sft_merged.gguf" -nt "$HF/model.safetensors" ]; then
  rm -rf "$HF"
  (cd bench && "../$VPY" train_peft.py prepare --gguf "$(cd "../$JOB" && pwd)/sft_merged.gguf" --out "$HF")
fi
load0=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/time -v -o "$WORK/trl_time.txt" "$VPY" bench/dpo_vs_trl.py trl --hf "$HF" --job "$JOB" \
    --out "$WORK/trl.json" --work "$WORK" --threads "$THREADS"
load1=$(cut -d' ' -f1-3 /proc/loadavg)
"$VPY" bench/dpo_vs_trl.py report --job "$JOB" --trl "$WORK/trl.json" --trl-time "$WORK/trl_time.txt" \
    --afinar-time "$JOB/dpo_time.txt" --load "before TRL [$load0], after [$load1]" --out "$OUT"
