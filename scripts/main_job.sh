#!/usr/bin/env bash
# The main job, end to end on a fresh machine: set up (Debian packages, venv, SmolLM2 GGUF, BBC
# News export), build, fine-tune SmolLM2-135M (Q4_1) for 5-class BBC News classification with
# afinar's default settings, then evaluate the best checkpoint on the held-out test split.
#
#   scripts/main_job.sh [OUT_DIR] [extra 'afinar train' flags...]
#
# OUT_DIR defaults to runs/bbc (replaced if it exists). Writes OUT_DIR/test_metrics.{txt,json}
# and OUT_DIR/main_job.json (wall times in seconds, test accuracy, macro-F1). The training and
# evaluation times are printed at the end; the target is test accuracy >= 95% with training +
# evaluation within 30 minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bbc}
shift || true

bash scripts/setup.sh
make -j"$(nproc)"

MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
t0=$(date +%s.%N)
build/afinar train -m "$MODEL" --train data/bbc/train.jsonl --val data/bbc/val.jsonl \
    --labels data/bbc/labels.txt -o "$OUT" --overwrite "$@"
t1=$(date +%s.%N)
build/afinar eval -m "$MODEL" -a "$OUT/best" --data data/bbc/test.jsonl --json "$OUT/test_metrics.json" \
    | tee "$OUT/test_metrics.txt"
t2=$(date +%s.%N)

python3 - "$OUT" "$t0" "$t1" "$t2" "$*" <<'EOF'
import json, sys, platform, os
out, t0, t1, t2, extra = sys.argv[1], *map(float, sys.argv[2:5]), sys.argv[5]
m = json.load(open(os.path.join(out, "test_metrics.json")))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
r = {"train_s": round(t1 - t0, 1), "eval_s": round(t2 - t1, 1), "total_s": round(t2 - t0, 1),
     "test_accuracy": m.get("accuracy"), "test_macro_f1": m.get("macro_f1"),
     "extra_flags": extra, "cpu": cpu, "cores": os.cpu_count()}
json.dump(r, open(os.path.join(out, "main_job.json"), "w"), indent=1)
print(f"\nmain job: train {r['train_s']/60:.1f} min + test eval {r['eval_s']/60:.1f} min = "
      f"{r['total_s']/60:.1f} min on {r['cores']} cores ({cpu}); "
      f"test accuracy {100*r['test_accuracy']:.2f}%, macro-F1 {r['test_macro_f1']:.3f}")
ok = r["test_accuracy"] >= 0.95 and r["total_s"] <= 1800
print("target (>= 95% test accuracy within 30 min):", "met" if ok else "NOT met")
EOF
