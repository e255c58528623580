#!/usr/bin/env bash
# One cell of the recipe evaluation (bench/recipe/README.md): train SET with RECIPE, evaluate the
# best adapter on the test split, write runs/recipe/SET-RECIPE/cell.json (wall times, test
# accuracy, macro-F1, CPU, load). Runs under `nice -n 5` (the machine is shared).
#   bench/recipe/run_one.sh SET RECIPE [extra train flags...]
# SET: bbc | rt | debates (data/SET/{train,val,test}.jsonl, labels.txt: scripts/fetch_data.sh,
# scripts/fetch_recipe_data.sh). RECIPE: fixed | auto | legacy (a binary from before --recipe
# existed: no --recipe flag; the same as fixed bit for bit, see the README). AFINAR overrides the
# binary (default build/afinar); NICE the niceness (default 5); CELL the cell's folder name (default
# SET-RECIPE; give another one for a run with extra flags, e.g. CELL=bbc-auto-tb10). RESUME=1 continues
# the cell's run from its newest checkpoint (one stopped by Ctrl-C / SIGTERM saves one) instead of
# starting over: cell.json then also gives the training seconds of all the run's parts.
set -euo pipefail
cd "$(dirname "$0")/../.."
SET=$1; RECIPE=$2; shift 2
BIN=${AFINAR:-build/afinar}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=runs/recipe/${CELL:-$SET-$RECIPE}
RF=(--recipe "$RECIPE"); [ "$RECIPE" = legacy ] && RF=()
START=(--overwrite); [ -n "${RESUME:-}" ] && { START=(--resume "$OUT"); RF=(); }
mkdir -p "$OUT"
[ -n "${RESUME:-}" ] || : > "$OUT/train.log"
load0=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
nice -n "${NICE:-5}" "$BIN" train -m "$MODEL" --train "data/$SET/train.jsonl" --val "data/$SET/val.jsonl" \
    --labels "data/$SET/labels.txt" -o "$OUT" "${START[@]}" --no-plot "${RF[@]}" "$@" 2>> "$OUT/train.log"
t1=$(date +%s.%N)
nice -n "${NICE:-5}" "$BIN" eval -m "$MODEL" -a "$OUT/best" --data "data/$SET/test.jsonl" --json "$OUT/test_metrics.json" \
    > "$OUT/test_metrics.txt"
t2=$(date +%s.%N)
load1=$(cut -d' ' -f1 /proc/loadavg)
RESUMED=${RESUME:+1} python3 bench/recipe/cell.py afinar "$OUT" "$SET" "$RECIPE" "$t0" "$t1" "$t2" "$load0" "$load1" "$*"
