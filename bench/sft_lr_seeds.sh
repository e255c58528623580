#!/usr/bin/env bash
# The learning rate of afinar's default causal-LM run, per model and seed: `afinar train --task
# causal-lm` with no flag but --epochs, --lr and --seed, each adapter scored as
# bench/sft_time_to_quality.sh scores it (greedy generation on the first 100 test prompts, first
# line, ROUGE-L F; completion loss on the same examples). The evidence behind the recipe's learning
# rate for runs of at most one pass (docs/RECIPE.md). Quality only: times are printed but the runs
# may share the machine.
#   bench/sft_lr_seeds.sh headlines|lede [OUT_DIR (build/bench/sft_lr/SET)]
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), SEEDS ("42 1 2"), LRS ("2e-4 4e-4"),
#        EPOCHS (1), AFINAR (build/afinar), THREADS (2)
# Sets as bench/sft_time_to_quality.py: headlines = the first 960 examples of data/bbc_headlines
# (the headline job's), lede = every example of data/bbc_lede. A finished cell
# (OUT/MODEL_sSEED_lrLR/eval.json) is not run again. Summary: OUT/summary.txt, one line per cell,
# then the mean of each model and learning rate.
set -euo pipefail
cd "$(dirname "$0")/.."
SET=${1:?usage: bench/sft_lr_seeds.sh headlines|lede [OUT_DIR]}
O=${2:-build/bench/sft_lr/$SET}
AF=${AFINAR:-build/afinar}
M=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$M" ] || { echo "sft_lr_seeds: $M missing (scripts/fetch_models.sh)" >&2; exit 1; }
case $SET in
  headlines) [ -f data/bbc_headlines/train.jsonl ] || scripts/fetch_data.sh
             src=data/bbc_headlines; n_train=960 ;;
  lede) [ -f data/bbc_lede/train.jsonl ] || python3 scripts/export_bbc_headlines.py --task lede
        src=data/bbc_lede; n_train=0 ;;
  *) echo "sft_lr_seeds: unknown set '$SET' (headlines | lede)" >&2; exit 2 ;;
esac
mkdir -p "$O"
if [ "$n_train" -gt 0 ]; then head -n "$n_train" "$src/train.jsonl" > "$O/train.jsonl"; else cp "$src/train.jsonl" "$O/train.jsonl"; fi
head -n 100 "$src/test.jsonl" > "$O/test.jsonl"
mname=$(basename "$M" .gguf)
for seed in ${SEEDS:-42 1 2}; do for lr in ${LRS:-2e-4 4e-4}; do
  d=$O/${mname}_s${seed}_lr$lr
  [ -f "$d/eval.json" ] && continue
  mkdir -p "$d"
  t0=$(date +%s)
  "$AF" train --task causal-lm -m "$M" --train "$O/train.jsonl" -o "$d/run" --overwrite --epochs "${EPOCHS:-1}" \
    --lr "$lr" --seed "$seed" -t "${THREADS:-2}" --no-plot > "$d/train.log" 2>&1
  t1=$(date +%s)
  "$AF" eval --task causal-lm -m "$M" -a "$d/run/final" --data "$O/test.jsonl" --max-seq-len 256 --generate 0 \
    --max-new-tokens 64 --first-line --show 0 -t "${THREADS:-2}" --json "$d/eval.json" > "$d/eval.txt" 2>&1
  t2=$(date +%s)
  steps=$(grep -oE '^done: [0-9]+ steps' "$d/train.log" | grep -oE '[0-9]+' || echo '?')
  echo "$mname seed $seed lr $lr: $steps steps, train $((t1 - t0)) s, eval $((t2 - t1)) s: $(python3 -c 'import json, sys
e = json.load(open(sys.argv[1]))
print("ROUGE-L F %.4f, loss %.4f, token accuracy %.4f" % (e["rouge_l"]["f"], float(e["loss"]), float(e["mean_token_accuracy"])))' "$d/eval.json")" | tee -a "$O/summary.txt"
done; done
# the mean of each model and learning rate over the cells on record
python3 - "$O" <<'EOF'
import glob, json, os, sys
cells = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*_s*_lr*/eval.json"))):
    name = os.path.basename(os.path.dirname(f))
    model, rest = name.rsplit("_s", 1)
    lr = rest.split("_lr", 1)[1]
    with open(f) as fh:
        e = json.load(fh)
    cells.setdefault((model, lr), []).append(e)
for (model, lr), es in sorted(cells.items()):
    r = [float(e["rouge_l"]["f"]) for e in es]
    l = [float(e["loss"]) for e in es]
    print(f"mean {model} lr {lr} over {len(es)} seeds: ROUGE-L F {sum(r) / len(r):.4f} (spread {max(r) - min(r):.4f}),"
          f" loss {sum(l) / len(l):.4f} (spread {max(l) - min(l):.4f})")
EOF
