#!/usr/bin/env python3
"""Time to a target test accuracy of one afinar cell of the recipe evaluation (bench/recipe/README.md),
as MLPerf Training times a run: the wall time until the run's kept adapter first reaches the target.

  time_to_target.py CELL_DIR [--target-accuracy A | --peft-cell DIR] [--afinar build/afinar] [--threads 0]

CELL_DIR is a bench/recipe/run_one.sh cell run with every checkpoint kept (`--save-total-limit 0`;
the default run saves one at each evaluation and keeps 2). At each evaluation the run's best/ is the
checkpoint with the best validation macro-F1 so far (any gain: trainer_eval.c note_metric); that
adapter is evaluated on the set's test split (`afinar eval`, once per distinct checkpoint). The time
at which it exists is bounded from above by the `elapsed` of the next step's train line (seconds
since the first step) plus the run's start-up (cell.json train_s minus the last train line's
elapsed: model load, tokenization, the prefix cache, and also the last evaluation and save, so the
bound is loose by those). The target is --target-accuracy, or the test accuracy of the PEFT cell
--peft-cell (bench/recipe/run_peft.sh), whose training seconds (model load + training) give the
ratio. Writes CELL_DIR/time_to_target.json and prints a markdown table.
"""
import argparse
import json
import os
import subprocess
import sys


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def test_accuracy(afinar, model, adapter, data, threads, cache):
    out = os.path.join(adapter, "test_metrics.json")
    if adapter not in cache:
        if not os.path.exists(out):
            subprocess.run([afinar, "eval", "-m", model, "-a", adapter, "--data", data, "--json", out, "-t",
                            str(threads)], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            cache[adapter] = json.load(f)
    return cache[adapter]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cell")
    ap.add_argument("--target-accuracy", type=float)
    ap.add_argument("--peft-cell")
    ap.add_argument("--afinar", default="build/afinar")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    with open(os.path.join(a.cell, "cell.json")) as f:
        cell = json.load(f)
    with open(os.path.join(a.cell, "run.json")) as f:
        run = json.load(f)
    peft = None
    if a.peft_cell:
        with open(os.path.join(a.peft_cell, "cell.json")) as f:
            peft = json.load(f)
    target = a.target_accuracy if a.target_accuracy is not None else peft["test_accuracy"] if peft else None
    if target is None:
        sys.exit("time_to_target: give --target-accuracy or --peft-cell")
    rows = read_jsonl(os.path.join(a.cell, "metrics.jsonl"))
    train = {r["step"]: r["elapsed"] for r in rows if r.get("type") == "train" and "elapsed" in r}
    evals = [r for r in rows if r.get("type") == "eval"]
    if not train or not evals:
        sys.exit(f"time_to_target: {a.cell}/metrics.jsonl has no train or eval lines")
    last_step = max(train)
    startup = max(0.0, cell["train_s"] - train[last_step])
    model, data = run["config"]["model"], os.path.join("data", cell["set"], "test.jsonl")
    best_f1, best_step, cache, table, reached = None, None, {}, [], None
    for e in evals:
        if best_f1 is None or e["macro_f1"] > best_f1:
            best_f1, best_step = e["macro_f1"], e["step"]
        ck = os.path.join(a.cell, f"checkpoint-{best_step}")
        if not os.path.isdir(ck):
            sys.exit(f"time_to_target: {ck} missing (run the cell with --save-total-limit 0)")
        m = test_accuracy(a.afinar, model, ck, data, a.threads, cache)
        t = startup + (train.get(e["step"] + 1, train[last_step]) if e["step"] < last_step else cell["train_s"] - startup)
        row = {"eval_step": e["step"], "val_accuracy": e["accuracy"], "val_macro_f1": e["macro_f1"],
               "kept_step": best_step, "test_accuracy": m["accuracy"], "test_macro_f1": m["macro_f1"],
               "time_s_at_most": round(t, 1)}
        table.append(row)
        if reached is None and m["accuracy"] >= target:
            reached = row
    res = {"cell": a.cell, "set": cell["set"], "target_accuracy": target, "startup_s_at_most": round(startup, 1),
           "train_s": cell["train_s"], "evaluations": table, "reached": reached}
    if peft:
        res["peft_train_s"] = peft["train_s"]
        if reached:
            res["ratio_to_peft"] = reached["time_s_at_most"] / peft["train_s"]
    with open(os.path.join(a.cell, "time_to_target.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"| evaluation at step | validation accuracy / macro-F1 | kept adapter (best so far) | its test accuracy / "
          f"macro-F1 | time (s, at most) |\n|---:|---|---:|---|---:|")
    for r in table:
        print(f"| {r['eval_step']} | {100 * r['val_accuracy']:.2f}% / {r['val_macro_f1']:.3f} | step {r['kept_step']} | "
              f"{100 * r['test_accuracy']:.2f}% / {r['test_macro_f1']:.3f} | {r['time_s_at_most']:.0f} |")
    if reached:
        extra = (f" = {res['ratio_to_peft']:.2f}x PEFT's {peft['train_s'] / 60:.1f} min of training" if peft else "")
        print(f"\ntarget {100 * target:.2f}% reached at the evaluation of step {reached['eval_step']}, after at most "
              f"{reached['time_s_at_most'] / 60:.1f} min{extra}")
    else:
        print(f"\ntarget {100 * target:.2f}% not reached")


if __name__ == "__main__":
    main()
