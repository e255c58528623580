#!/usr/bin/env python3
"""Write OUT/cell.json, one cell of the recipe evaluation (read by bench/recipe/summarize.py), for
bench/recipe/run_one.sh (afinar) and bench/recipe/run_peft.sh (PyTorch + PEFT), and print its line.

  cell.py afinar OUT SET RECIPE T0 T1 T2 LOAD0 LOAD1 EXTRA
      T0..T1 the `afinar train` wall time, T1..T2 the `afinar eval` of OUT/best on the test split
      (OUT/test_metrics.json, OUT/run.json: the settings and the recipe's choices).
  cell.py peft OUT SET RECIPE T0 T1 T2 LOAD0 LOAD1 EXTRA
      T0..T2 the whole peft_job.py process; its OUT/peft_result.json gives the training time (model
      load + training loop), the test evaluation time, accuracy, macro-F1 and the settings.
With RESUMED=1 in the environment (run_one.sh RESUME=1: the run continued from a checkpoint),
train_s is the whole run's training seconds, the last "elapsed" of OUT/metrics.jsonl (kept across
resumes), and resumed_wall_s the last part's wall time.
Times in seconds since the epoch (date +%s.%N); LOAD0/1 the 1-minute load average before/after."""
import json
import os
import sys

kind, out, s, r, t0, t1, t2, l0, l1, extra = sys.argv[1:11]
cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
c = {"set": s, "recipe": r, "extra_flags": extra}
if kind == "afinar":
    m = json.load(open(os.path.join(out, "test_metrics.json")))
    run = json.load(open(os.path.join(out, "run.json")))
    c.update({"train_s": round(float(t1) - float(t0), 1), "eval_s": round(float(t2) - float(t1), 1),
              "test_accuracy": m.get("accuracy"), "test_macro_f1": m.get("macro_f1"),
              "total_steps": run.get("total_steps"), "recipe_choices": run.get("recipe"), "config": run.get("config")})
    if os.environ.get("RESUMED"):
        el = [json.loads(ln).get("elapsed") for ln in open(os.path.join(out, "metrics.jsonl")) if '"elapsed"' in ln]
        c.update({"resumed": True, "resumed_wall_s": c["train_s"], "train_s": round(el[-1], 1)})
else:
    p = json.load(open(os.path.join(out, "peft_result.json")))
    c.update({"train_s": round(p["load_s"] + p["train_s"], 1), "eval_s": p["eval_s"],
              "process_s": round(float(t2) - float(t0), 1), "test_accuracy": p["test_accuracy"],
              "test_macro_f1": p["test_macro_f1"], "total_steps": p["total_steps"], "recipe_choices": None,
              "config": p["config"], "versions": p["versions"]})
c.update({"cpu": cpu, "cores": os.cpu_count(), "load_before": float(l0), "load_after": float(l1)})
with open(os.path.join(out, "cell.json"), "w") as fh:
    json.dump(c, fh, indent=1)
print(f"{s:8} {r:6} train {c['train_s'] / 60:5.1f} min  eval {c['eval_s'] / 60:4.1f} min  "
      f"acc {100 * c['test_accuracy']:.2f}%  macro-F1 {c['test_macro_f1']:.3f}  (load {l0} -> {l1})")
