#!/usr/bin/env bash
# The main job (scripts/main_job.sh: SmolLM2 Q4_1, BBC News, the automatic recipe) for each seed and
# frozen-product precision, each best adapter evaluated on the test split with exact f32 products
# (`afinar eval`): the evidence for or against a precision as the recipe's choice (docs/RECIPE.md).
# Quality first: times are printed (training and evaluation wall seconds), but the runs may share
# the machine.
#   bench/class_precision_seeds.sh [OUT_DIR (build/bench/class_precision)]
#   env: SEEDS ("42 1 2"), PRECISIONS ("int8 bf16"), AFINAR (build/afinar), THREADS (2),
#        EXTRA (more `afinar train` flags), TAG (a suffix of the cells' names for those runs)
# A finished cell (OUT/sSEED_PREC[TAG]/test.json) is not run again. Summary: OUT/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
O=${1:-build/bench/class_precision}
AF=${AFINAR:-build/afinar}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$M" ] || { echo "class_precision_seeds: $M missing (scripts/fetch_models.sh)" >&2; exit 1; }
[ -f data/bbc/train.jsonl ] || scripts/fetch_data.sh
mkdir -p "$O"
for seed in ${SEEDS:-42 1 2}; do for prec in ${PRECISIONS:-int8 bf16}; do
  d=$O/s${seed}_$prec${TAG:-}
  [ -f "$d/test.json" ] && continue
  mkdir -p "$d"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  "$AF" train -m "$M" --train data/bbc/train.jsonl --val data/bbc/val.jsonl --labels data/bbc/labels.txt \
    -o "$d/run" --overwrite --seed "$seed" -t "${THREADS:-2}" --no-plot --frozen-precision "$prec" ${EXTRA:-} \
    > "$d/train.log" 2>&1
  t1=$(date +%s)
  "$AF" eval -m "$M" -a "$d/run/best" --data data/bbc/test.jsonl -t "${THREADS:-2}" --json "$d/test.json" \
    > "$d/test.txt" 2>&1
  t2=$(date +%s)
  vals=$(grep -o 'accuracy [0-9.]*' "$d/train.log" | grep -v '^$' | awk '{printf "%s%.4f", (NR>1?" ":""), $2}')
  echo "seed $seed $prec${EXTRA:+ $EXTRA} train $((t1 - t0)) s eval $((t2 - t1)) s: $(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print('test accuracy %.4f macro-F1 %.4f' % (m['accuracy'], m['macro_f1']))" "$d/test.json"); validation accuracy: $vals" | tee -a "$O/summary.txt"
done; done
