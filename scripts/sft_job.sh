#!/usr/bin/env bash
# The second main job: fine-tune SmolLM2-135M-Instruct (Q4_1 GGUF) with LoRA to
# write the headline of a BBC News article from its body (prompt/completion SFT, completion-only
# loss), and report on the test split before and after training: completion loss (afinar eval on
# causal-LM data), exact match and ROUGE-L of greedy headlines (afinar eval --generate), with a few
# example headlines.
#
#   scripts/sft_job.sh [OUT_DIR] [extra 'afinar train' flags...]
#
# env: N_TRAIN (960: the first N_TRAIN training examples, 1 epoch = N_TRAIN/16 optimizer steps),
#      N_TEST (100: the first N_TEST test examples are scored), MAX_NEW (32 new tokens at most per
#      headline), SHOW (5 examples printed), THREADS (0 = all cores)
#
# Data: data/bbc_headlines/{train,test}.jsonl (scripts/export_bbc_headlines.py, same split as the
# classification job): {"prompt": "Write the headline of this BBC News article.\n\n<first 100
# words of the body>\n\nHeadline:", "completion": " <headline>"}, ~157 tokens per example
# (max 224, so --max-seq-len 256 cuts nothing), ~8 completion tokens (headline + end of turn).
# Scoring: greedy, the first line of the generation (generation stops at the newline that ends it,
# or at an end-of-generation token), exact match after trimming outer whitespace (case kept),
# ROUGE-L F (rouge_score's tokenization) averaged over the examples.
#
# Budget (30 min on 2 cores): afinar trains LoRA all-linear on all 30 layers at ~200 tokens/s on
# the project's Zen 3 (README: 1.58 samples/s x 128 tokens); 960 examples x 157 tokens = 151k
# tokens ~ 13-14 min, plus 4 evaluations of 100 examples (~1-2 min each) and the build.
#
# Training settings (the flags of `afinar train --task causal-lm`): LoRA r=16, alpha=32 on all 7
# projections of all layers (--targets all-linear --lora-layers all, as QLoRA / TRL recipes),
# lr 4e-4 cosine with 6% warm-up, effective batch 16 (8 x 2), 1 epoch, max_seq_len 256, seed 42.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bbc_headlines}
shift || true
N_TRAIN=${N_TRAIN:-960}
N_TEST=${N_TEST:-100}
MAX_NEW=${MAX_NEW:-32}
SHOW=${SHOW:-5}
THREADS=${THREADS:-0}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
AF=build/afinar

t_start=$(date +%s)
bash scripts/setup.sh
make -j"$(nproc)"
mkdir -p "$OUT"
head -n "$N_TRAIN" data/bbc_headlines/train.jsonl > "$OUT/train_subset.jsonl"
head -n "$N_TEST" data/bbc_headlines/test.jsonl > "$OUT/test_subset.jsonl"
echo "sft_job: $(wc -l < "$OUT/train_subset.jsonl") training examples, $(wc -l < "$OUT/test_subset.jsonl") test examples -> $OUT"

# report PHASE [ADAPTER]: completion loss, perplexity, token accuracy over every test example, then
# the generation scores (one 'afinar eval --task causal-lm --generate' call)
report() {
  local phase=$1 adapter=${2:-} a=()
  [ -n "$adapter" ] && a=(-a "$adapter")
  "$AF" eval --task causal-lm -m "$MODEL" "${a[@]}" --data "$OUT/test_subset.jsonl" --max-seq-len 256 \
      --generate "$N_TEST" --max-new-tokens "$MAX_NEW" --first-line --show "$SHOW" -t "$THREADS" \
      --json "$OUT/eval_$phase.json" | tee "$OUT/eval_$phase.txt"
}

field() { # field FILE LABEL -> the number after LABEL at the start of a line
  awk -v k="$2" 'index($0, k) == 1 { sub("^" k "[ ]*", ""); split($0, w, " "); print w[1]; exit }' "$1"
}

echo "== before training (base model) =="
t0=$(date +%s)
report before
t1=$(date +%s)

echo "== training =="
"$AF" train --task causal-lm -m "$MODEL" --train "$OUT/train_subset.jsonl" -o "$OUT/run" --overwrite \
    --max-seq-len 256 --epochs 1 --batch 8 --grad-accum 2 --lr 4e-4 --schedule cosine --warmup 6% \
    --targets all-linear --lora-layers all --lora-r 16 --lora-alpha 32 --seed 42 -t "$THREADS" "$@"
t2=$(date +%s)

echo "== after training ($OUT/run/final) =="
report after "$OUT/run/final"
t3=$(date +%s)

{
  echo "sft_job summary ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores)"
  printf '%-22s %12s %12s\n' "" "before" "after"
  printf '%-22s %12s %12s\n' "exact match" "$(field "$OUT/eval_before.txt" 'exact match')" "$(field "$OUT/eval_after.txt" 'exact match')"
  printf '%-22s %12s %12s\n' "ROUGE-L F" "$(field "$OUT/eval_before.txt" 'ROUGE-L F')" "$(field "$OUT/eval_after.txt" 'ROUGE-L F')"
  printf '%-22s %12s %12s\n' "token accuracy" "$(field "$OUT/eval_before.txt" 'token accuracy')" "$(field "$OUT/eval_after.txt" 'token accuracy')"
  printf '%-22s %12s %12s\n' "completion loss" "$(field "$OUT/eval_before.txt" 'loss')" "$(field "$OUT/eval_after.txt" 'loss')"
  echo "times: setup+build $(( t0 - t_start )) s, eval before $(( t1 - t0 )) s, training $(( t2 - t1 )) s, eval after $(( t3 - t2 )) s, total $(( t3 - t_start )) s"
  [ $(( t3 - t_start )) -le 1800 ] && echo "within 30 minutes: yes" || echo "within 30 minutes: NO"
} | tee "$OUT/sft_job.txt"
