#!/usr/bin/env bash
# One cell of the recipe evaluation (bench/recipe/README.md): train SET with RECIPE, evaluate the
# best adapter on the test split, write runs/recipe/SET-RECIPE/cell.json (wall times, test
# accuracy, macro-F1, CPU, load). Runs under `nice -n 5` (the machine is shared).
#   bench/recipe/run_one.sh SET RECIPE [extra train flags...]
# SET: bbc | rt | debates (data/SET/{train,val,test}.jsonl, labels.txt: scripts/fetch_data.sh,
# scripts/fetch_recipe_data.sh). RECIPE: fixed | auto | legacy (a binary from before --recipe
# existed: no --recipe flag; the same as fixed bit for bit, see the README). AFINAR overrides the
# binary (default build/afinar); NICE the niceness (default 5).
set -euo pipefail
cd "$(dirname "$0")/../.."
SET=$1; RECIPE=$2; shift 2
BIN=${AFINAR:-build/afinar}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=runs/recipe/$SET-$RECIPE
RF=(--recipe "$RECIPE"); [ "$RECIPE" = legacy ] && RF=()
mkdir -p "$OUT"
load0=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s.%N)
nice -n "${NICE:-5}" "$BIN" train -m "$MODEL" --train "data/$SET/train.jsonl" --val "data/$SET/val.jsonl" \
    --labels "data/$SET/labels.txt" -o "$OUT" --overwrite --no-plot "${RF[@]}" "$@" 2> "$OUT/train.log"
t1=$(date +%s.%N)
nice -n "${NICE:-5}" "$BIN" eval -m "$MODEL" -a "$OUT/best" --data "data/$SET/test.jsonl" --json "$OUT/test_metrics.json" \
    > "$OUT/test_metrics.txt"
t2=$(date +%s.%N)
load1=$(cut -d' ' -f1 /proc/loadavg)
python3 - "$OUT" "$SET" "$RECIPE" "$t0" "$t1" "$t2" "$load0" "$load1" "$*" <<'PY'
import json, os, sys
out, s, r, t0, t1, t2, l0, l1, extra = sys.argv[1:10]
m = json.load(open(os.path.join(out, "test_metrics.json")))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
run = json.load(open(os.path.join(out, "run.json")))
c = {"set": s, "recipe": r, "extra_flags": extra, "train_s": round(float(t1) - float(t0), 1),
     "eval_s": round(float(t2) - float(t1), 1), "test_accuracy": m.get("accuracy"), "test_macro_f1": m.get("macro_f1"),
     "total_steps": run.get("total_steps"), "recipe_choices": run.get("recipe"), "config": run.get("config"),
     "cpu": cpu, "cores": os.cpu_count(), "load_before": float(l0), "load_after": float(l1)}
json.dump(c, open(os.path.join(out, "cell.json"), "w"), indent=1)
print(f"{s:8} {r:6} train {c['train_s']/60:5.1f} min  eval {c['eval_s']/60:4.1f} min  "
      f"acc {100*c['test_accuracy']:.2f}%  macro-F1 {c['test_macro_f1']:.3f}  (load {l0} -> {l1})")
PY
