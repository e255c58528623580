#!/usr/bin/env bash
# The preference job: SFT then DPO of SmolLM2-135M-Instruct (Q4_1 GGUF) with LoRA on BBC headlines.
#
#   scripts/dpo_job.sh [OUT_DIR] [extra 'afinar train --task dpo' flags...]
#
# env: N_SFT (256: SFT examples, the first of data/bbc_headlines/train.jsonl), N_DPO (128:
#      preference pairs from the next training examples), N_TEST (64: held-out pairs / generations
#      from the test split), PAIRS (own: the rejected headline is the SFT model's own greedy
#      headline for the article | other: another article's true headline), THREADS (0 = all
#      cores), MAX_NEW (32), EVAL_EVERY (0: evaluate the held-out pairs once, at the end of the
#      DPO epoch; N: every N steps), SKIP_SFT=1 (keep OUT_DIR/sft/final from an earlier run). About 20 min
#      on 2 quiet cores with the defaults; N_SFT=64 N_DPO=16 N_TEST=8 is the quick check.
#
# 1. SFT: afinar train --task causal-lm on the first N_SFT headline examples (1 epoch, batch 8 x 2,
#    lr 4e-4, LoRA r 16 all-linear, as scripts/sft_job.sh), merged into the base
#    (afinar merge --type q8_0): the SFT model, which is also DPO's reference;
# 2. greedy headlines of the SFT model on N_TEST test articles (exact match, ROUGE-L) and, with
#    PAIRS=own, on the N_DPO training articles of the pairs;
# 3. data: scripts/make_pref_headlines.py -> OUT_DIR/pref/{train,test}.jsonl: the article's true
#    headline "chosen", the SFT model's greedy headline (PAIRS=own; pairs where it equals the true
#    one are left out) or another article's headline (PAIRS=other, seeded) "rejected";
# 4. DPO: afinar train --task dpo on the pairs (1 epoch, batch 4 x 2 pairs, lr 1e-4, beta 0.1,
#    LoRA r 16 all-linear) with the held-out pairs as validation: eval_rewards/accuracies;
# 5. greedy headlines of the SFT model + the DPO adapter on the same test articles.
# Times of every stage are printed; everything is written under OUT_DIR. bench/dpo_vs_trl.sh runs
# step 4 with TRL's DPOTrainer on the same merged model and pairs.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/dpo_headlines}
shift || true
N_SFT=${N_SFT:-256}
N_DPO=${N_DPO:-128}
N_TEST=${N_TEST:-64}
PAIRS=${PAIRS:-own}
THREADS=${THREADS:-0}
MAX_NEW=${MAX_NEW:-32}
EVAL_EVERY=${EVAL_EVERY:-0}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
AF=build/afinar
case "$PAIRS" in own|other) ;; *) echo "dpo_job: PAIRS must be own or other, not '$PAIRS'" >&2; exit 2 ;; esac
mkdir -p "$OUT"
t0=$(date +%s)
head -n "$N_SFT" data/bbc_headlines/train.jsonl > "$OUT/sft_train.jsonl"
head -n "$N_TEST" data/bbc_headlines/test.jsonl > "$OUT/test_subset.jsonl"
sed -n "$(( N_SFT + 1 )),$(( N_SFT + N_DPO ))p" data/bbc_headlines/train.jsonl > "$OUT/dpo_articles.jsonl"

echo "== SFT ($N_SFT examples) =="
if [ "${SKIP_SFT:-0}" = 1 ] && [ -d "$OUT/sft/final" ]; then echo "SKIP_SFT=1: keeping $OUT/sft/final"; else
"$AF" train --task causal-lm -m "$MODEL" --train "$OUT/sft_train.jsonl" -o "$OUT/sft" --overwrite --no-plot \
    --max-seq-len 256 --epochs 1 --batch 8 --grad-accum 2 --lr 4e-4 --schedule cosine --warmup 6% \
    --targets all-linear --lora-layers all --lora-r 16 --lora-alpha 32 --seed 42 -t "$THREADS"
fi
"$AF" merge -m "$MODEL" -a "$OUT/sft/final" -o "$OUT/sft_merged.gguf" --type q8_0 --overwrite
t1=$(date +%s)

gen() { # gen NAME DATA [ADAPTER]: greedy first-line headlines of the SFT model (+ ADAPTER)
  local a=() n
  [ -n "${3:-}" ] && a=(-a "$3")
  n=$(wc -l < "$2")
  "$AF" eval --task causal-lm -m "$OUT/sft_merged.gguf" "${a[@]}" --data "$2" --max-seq-len 256 \
      --generate "$n" --max-new-tokens "$MAX_NEW" --first-line --show 3 -t "$THREADS" --json "$OUT/gen_$1.json" \
      | tee "$OUT/gen_$1.txt"
}
echo "== headlines of the SFT model =="
gen sft "$OUT/test_subset.jsonl"
own=()
if [ "$PAIRS" = own ]; then
  echo "== the SFT model's headlines for the $N_DPO DPO articles (the rejected side) =="
  gen sft_dpo_articles "$OUT/dpo_articles.jsonl"
  own=(--own-train "$OUT/gen_sft_dpo_articles.json" --own-test "$OUT/gen_sft.json")
fi
python3 scripts/make_pref_headlines.py --out "$OUT/pref" --skip "$N_SFT" --n-train "$N_DPO" --n-test "$N_TEST" "${own[@]}"
t2=$(date +%s)

echo "== DPO ($(wc -l < "$OUT/pref/train.jsonl") pairs, $(wc -l < "$OUT/pref/test.jsonl") held-out pairs, PAIRS=$PAIRS) =="
tv=()  # the DPO stage's wall time and peak RSS, for bench/dpo_vs_trl.sh
[ -x /usr/bin/time ] && tv=(/usr/bin/time -v -o "$OUT/dpo_time.txt")
"${tv[@]}" "$AF" train --task dpo -m "$OUT/sft_merged.gguf" --train "$OUT/pref/train.jsonl" --val "$OUT/pref/test.jsonl" \
    -o "$OUT/dpo" --overwrite --no-plot --max-seq-len 256 --epochs 1 --batch 4 --grad-accum 2 --lr 1e-4 \
    --beta 0.1 --targets all-linear --lora-layers all --lora-r 16 --lora-alpha 32 --seed 42 -t "$THREADS" \
    --eval-every "$EVAL_EVERY" "$@"
t3=$(date +%s)

echo "== headlines of the SFT model + DPO adapter =="
gen dpo "$OUT/test_subset.jsonl" "$OUT/dpo/final"
t4=$(date +%s)

field() { awk -v k="$2" 'index($0, k) == 1 { sub("^" k "[ ]*", ""); split($0, w, " "); print w[1]; exit }' "$1"; }
{
  echo "dpo_job summary ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores)"
  grep '"type":"eval"' "$OUT/dpo/metrics.jsonl" | tail -1
  printf '%-22s %12s %12s\n' "" "SFT" "SFT+DPO"
  printf '%-22s %12s %12s\n' "exact match" "$(field "$OUT/gen_sft.txt" 'exact match')" "$(field "$OUT/gen_dpo.txt" 'exact match')"
  printf '%-22s %12s %12s\n' "ROUGE-L F" "$(field "$OUT/gen_sft.txt" 'ROUGE-L F')" "$(field "$OUT/gen_dpo.txt" 'ROUGE-L F')"
  echo "pairs: PAIRS=$PAIRS, $(wc -l < "$OUT/pref/train.jsonl") training, $(wc -l < "$OUT/pref/test.jsonl") held out"
  echo "times: SFT+merge $(( t1 - t0 )) s, SFT headlines + pairs $(( t2 - t1 )) s, DPO $(( t3 - t2 )) s, DPO headlines $(( t4 - t3 )) s, total $(( t4 - t0 )) s"
} | tee "$OUT/dpo_job.txt"
