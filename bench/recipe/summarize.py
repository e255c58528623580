#!/usr/bin/env python3
"""Collect the cells of the recipe evaluation (runs/recipe/*/cell.json, written by
bench/recipe/run_one.sh) into bench/results/recipe.{md,json}: per data set and recipe the test
accuracy, macro-F1, training and evaluation wall time, the load average around the run, the
recipe's choices, and the CPU. Usage: python3 bench/recipe/summarize.py [RUNS_DIR] [OUT_DIR]"""
import glob
import json
import os
import sys

runs = sys.argv[1] if len(sys.argv) > 1 else "runs/recipe"
out = sys.argv[2] if len(sys.argv) > 2 else "bench/results"
cells = []
for f in sorted(glob.glob(os.path.join(runs, "*", "cell.json"))):
    with open(f) as fh:
        cells.append(json.load(fh))
order = {"bbc": 0, "rt": 1, "debates": 2}
rorder = {"legacy": 0, "fixed": 1, "auto": 2}
cells.sort(key=lambda c: (order.get(c["set"], 9), rorder.get(c["recipe"], 9), c.get("extra_flags", "")))
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "recipe.json"), "w") as fh:
    json.dump(cells, fh, indent=1)
cpu = cells[0]["cpu"] if cells else "?"
lines = [f"# Recipe evaluation (bench/recipe; {cpu}, {cells[0]['cores'] if cells else '?'} cores, shared)", "",
         "| data set | recipe | flags | test accuracy | macro-F1 | training | test evaluation | load before -> after | choices |",
         "|---|---|---|---:|---:|---:|---:|---|---|"]
for c in cells:
    rc = c.get("recipe_choices") or {}
    ch = "" if not rc else (f"{rc.get('epochs', 0):g} ep, {rc.get('lora_layers')}, {rc.get('max_seq_len')} tok, "
                            f"{rc.get('class_weights')}")
    lines.append(f"| {c['set']} | {'fixed (binary before the recipe)' if c['recipe'] == 'legacy' else c['recipe']} | "
                 f"{c.get('extra_flags', '')} | {100 * c['test_accuracy']:.2f}% | {c['test_macro_f1']:.3f} | "
                 f"{c['train_s'] / 60:.1f} min | {c['eval_s'] / 60:.1f} min | {c['load_before']} -> {c['load_after']} | {ch} |")
with open(os.path.join(out, "recipe.md"), "w") as fh:
    fh.write("\n".join(lines) + "\n")
print("\n".join(lines))
