#!/usr/bin/env python3
"""Collect the cells of the recipe evaluation (runs/recipe/*/cell.json, written by
bench/recipe/run_one.sh for afinar and bench/recipe/run_peft.sh for PyTorch + PEFT) into
bench/results/recipe.{md,json}: per data set and recipe the test accuracy, macro-F1, training and
evaluation wall time, the load average around the run, the recipe's choices, and the CPU; then one
comparison table, fixed vs auto vs PEFT per data set (the cells without extra flags).
bench/recipe/cited.json adds cells measured elsewhere (BBC News: the main job's runs, with their
source); a measured cell of the same set, recipe and flags replaces a cited one.
Usage: python3 bench/recipe/summarize.py [RUNS_DIR] [OUT_DIR]"""
import glob
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
runs = sys.argv[1] if len(sys.argv) > 1 else "runs/recipe"
out = sys.argv[2] if len(sys.argv) > 2 else "bench/results"
cells = []
for f in sorted(glob.glob(os.path.join(runs, "*", "cell.json"))):
    with open(f) as fh:
        cells.append(json.load(fh))
have = {(c["set"], c["recipe"], c.get("extra_flags", "")) for c in cells}
with open(os.path.join(here, "cited.json")) as fh:
    cells += [c for c in json.load(fh) if (c["set"], c["recipe"], c.get("extra_flags", "")) not in have]
order = {"bbc": 0, "rt": 1, "debates": 2}
rorder = {"legacy": 0, "fixed": 1, "auto": 2, "peft": 3}
cells.sort(key=lambda c: (order.get(c["set"], 9), rorder.get(c["recipe"], 9), c.get("extra_flags", "")))
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "recipe.json"), "w") as fh:
    json.dump(cells, fh, indent=1)


def choices(c):
    """What the cell trained with: the recipe's choices (auto), the documented fixed defaults, or
    the PEFT job's settings."""
    rc = c.get("recipe_choices") or {}
    if rc:
        return f"{rc.get('epochs', 0):.3g} ep, {rc.get('lora_layers')}, {rc.get('max_seq_len')} tok, {rc.get('class_weights')}"
    if c["recipe"] in ("fixed", "legacy"):
        return "1 ep, top10, 128 tok, uniform"
    if c["recipe"] == "peft":
        k = c.get("config") or {}
        v = c.get("versions") or {}
        return (f"{k.get('epochs')} ep, all layers ({k.get('targets')}), {k.get('max-seq-len')} tok, "
                f"{k.get('class-weights')}, lr {k.get('lr')}, batch {k.get('batch')}, {k.get('precision')}; "
                f"torch {v.get('torch')}, peft {v.get('peft')}")
    return ""


def load(c):
    if c.get("load_text"):
        return c["load_text"]
    return f"{c['load_before']} -> {c['load_after']}"


def name(c):
    return {"legacy": "fixed (binary before the recipe)", "peft": "PyTorch + PEFT"}.get(c["recipe"], c["recipe"])


cpu = cells[0]["cpu"] if cells else "?"
lines = [f"# Recipe evaluation (bench/recipe; {cpu}, {cells[0]['cores'] if cells else '?'} cores, shared)", "",
         "Every cell: SmolLM2-135M-Instruct (Q4_1 GGUF for afinar, its float32 conversion for PyTorch), test split, "
         "the best adapter (afinar) or the last step (PEFT). Wall times on a shared machine: the load average (1 min) "
         "before -> after says how loaded; they are not speed figures.", "",
         "| data set | recipe | flags | test accuracy | macro-F1 | training | test evaluation | load before -> after | choices | source |",
         "|---|---|---|---:|---:|---:|---:|---|---|---|"]
for c in cells:
    lines.append(f"| {c['set']} | {name(c)} | {c.get('extra_flags', '')} | {100 * c['test_accuracy']:.2f}% | "
                 f"{c['test_macro_f1']:.3f} | {c['train_s'] / 60:.1f} min | {c['eval_s'] / 60:.1f} min | {load(c)} | "
                 f"{choices(c)} | {c.get('source', 'measured (bench/recipe)')} |")
lines += ["", "## Fixed vs auto vs PyTorch + PEFT (no extra flags): test accuracy / macro-F1 / training minutes", "",
          "| data set | fixed | auto (default budget) | PyTorch + PEFT |", "|---|---|---|---|"]
for s in sorted({c["set"] for c in cells}, key=lambda s: order.get(s, 9)):
    row = [s]
    for r in ("fixed", "auto", "peft"):
        m = [c for c in cells if c["set"] == s and c["recipe"] == r and not c.get("extra_flags")]
        if r == "fixed" and not m:
            m = [c for c in cells if c["set"] == s and c["recipe"] == "legacy" and not c.get("extra_flags")]
        row.append(f"{100 * m[0]['test_accuracy']:.2f}% / {m[0]['test_macro_f1']:.3f} / {m[0]['train_s'] / 60:.1f} min"
                   if m else "not run")
    lines.append("| " + " | ".join(row) + " |")
with open(os.path.join(out, "recipe.md"), "w") as fh:
    fh.write("\n".join(lines) + "\n")
print("\n".join(lines))
