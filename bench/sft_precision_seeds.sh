#!/usr/bin/env bash
# The headline job's training (scripts/sft_job.sh: SmolLM2 Q4_1, the first 960 BBC headline
# examples, 1 epoch, all-linear r 16 on all layers) for each seed and frozen-product precision, each
# adapter evaluated with exact f32 products on the first 100 test articles: the evidence behind the
# recipe's bf16 for causal-LM training (docs/RECIPE.md). Quality only: times are printed but the
# runs may share the machine.
#   bench/sft_precision_seeds.sh [OUT_DIR (build/bench/sft_precision)]
#   env: SEEDS ("42 1 2"), PRECISIONS ("bf16 f32"), AFINAR (build/afinar), THREADS (2),
#        EXTRA (more `afinar train` flags, e.g. "--lora-dropout 0"), TAG (a suffix of the cells' names
#        for those runs, e.g. _d0)
# A finished cell (OUT/sSEED_PREC[TAG]/eval.json) is not run again. Summary: OUT/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
O=${1:-build/bench/sft_precision}
AF=${AFINAR:-build/afinar}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$M" ] || { echo "sft_precision_seeds: $M missing (scripts/fetch_models.sh)" >&2; exit 1; }
[ -f data/bbc_headlines/train.jsonl ] || scripts/fetch_data.sh
mkdir -p "$O"
head -n 960 data/bbc_headlines/train.jsonl > "$O/train.jsonl"
head -n 100 data/bbc_headlines/test.jsonl > "$O/test.jsonl"
for seed in ${SEEDS:-42 1 2}; do for prec in ${PRECISIONS:-bf16 f32}; do
  d=$O/s${seed}_$prec${TAG:-}
  [ -f "$d/eval.json" ] && continue
  mkdir -p "$d"
  t0=$(date +%s)
  "$AF" train --task causal-lm -m "$M" --train "$O/train.jsonl" -o "$d/run" --overwrite --max-seq-len 256 --epochs 1 \
    --batch 8 --grad-accum 2 --lr 4e-4 --schedule cosine --warmup 6% --targets all-linear --lora-layers all \
    --lora-r 16 --lora-alpha 32 --seed "$seed" -t "${THREADS:-2}" --no-plot --frozen-precision "$prec" ${EXTRA:-} > "$d/train.log" 2>&1
  t1=$(date +%s)
  "$AF" eval --task causal-lm -m "$M" -a "$d/run/final" --data "$O/test.jsonl" --max-seq-len 256 --generate 100 \
    --max-new-tokens 32 --first-line --show 0 -t "${THREADS:-2}" --json "$d/eval.json" > "$d/eval.txt" 2>&1
  t2=$(date +%s)
  echo "seed $seed $prec${EXTRA:+ $EXTRA} train $((t1 - t0)) s eval $((t2 - t1)) s: $(grep -E '^(ROUGE-L F|loss|token accuracy)' "$d/eval.txt" | tr -s ' ' | tr '\n' ' ')" | tee -a "$O/summary.txt"
done; done
