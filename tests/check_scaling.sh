#!/bin/sh
# check_scaling.sh — the model-size scaling benchmark's pieces (run by `make test`; docs/BENCHMARKS.md):
#   - bench/scaling.py's verdicts on a committed result file (tests/fixtures/scaling_results.json,
#     values chosen so that each kind of target is met, missed or not measured): the memory target
#     met, decode tokens/s met (on the wall clock and per CPU-second), SFT tokens/s missed (the
#     first steps' rate fell 7.5x for 6.65x the FLOPs: the 8B ran one step), a quadratic load time
#     caught (exponent 2.02), a failed cell shown as failed, the CPU share and tokens per CPU-second
#     in the table;
#   - scripts/make_scale_models.py writes a loadable GGUF (the "tiny" shape: 2 layers, untied LM
#     head, every matrix Q4_K): the `gguf` package dequantizes its matrices to finite, zero-mean
#     weights of standard deviation ~0.02 and norms ~1, rope_freqs holds the llama3 factors, and
#     `afinar generate` and one `afinar train --task causal-lm` step run on it with a finite loss.
#     Needs the venv .venv-scale (made by scripts/make_scale_models.sh: `gguf`, `numpy` from PyPI)
#     and AFINAR_BIN; skipped (counted) when pip cannot reach PyPI or the binary is missing.
# Prints the RESULT line run_all.sh sums.
bin=${AFINAR_BIN:-build/afinar}
pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/afinar_scaling_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# ---- the report's verdicts ----
cp tests/fixtures/scaling_results.json "$tmp/r.json"
if python3 bench/scaling.py report --json "$tmp/r.json" > "$tmp/report.txt" 2>&1; then ok; else bad "report: exit $?: $(tail -3 "$tmp/report.txt")"; fi
md="$tmp/r.md"
[ -f "$md" ] && ok || bad "report: no $md written"
expect() { grep -qF -- "$1" "$md" && ok || bad "report: expected the line: $1"; }
expect "- memory: 8B SFT 512 --checkpointing peak RSS <= 1.5 x Q4_K bytes + 1.5 GB: **met** (6.00 GB vs limit 7.73 GB"
expect "- tokens/s (wall clock): decode falls <= FLOPs/token grow x 1.10, 1b -> 8b: **met** (fell 5.00x, FLOPs/token grew 6.67x)"
expect "- tokens/s (per CPU-second): decode falls <= FLOPs/token grow x 1.10, 1b -> 8b: **met** (fell 1.25x, FLOPs/token grew 6.67x)"
expect "- tokens/s (wall clock): causal-LM SFT 512, --checkpointing falls <= FLOPs/token grow x 1.10, 1b -> 8b: **missed** (fell 7.50x, FLOPs/token grew 6.65x, first steps)"
expect "- tokens/s (per CPU-second): causal-LM SFT 512, --checkpointing falls <= FLOPs/token grow x 1.10: **not measured**"
expect "- linear: load time ~ bytes^k, k <= 1.25 (decode cell): **missed** (1b -> 8b: load_s 0.20 -> 9.80, bytes x6.88: exponent 2.02)"
expect "- linear: first step ~ FLOPs^k, k <= 1.25 (causal-LM SFT 512, --checkpointing): **met**"
expect "- linear: peak RSS ~ bytes^k, k <= 1.25 (causal-LM SFT 512): **not measured**"
expect "| 8b | causal-LM SFT 512 | failed: killed by the watchdog: RSS above 12 GiB |"
expect "| 1b | decode | 0.67 | 1.19 | 0.2 | - | - | 10.00 (prompt 32.0 tok/s) | 2.00 | 5.00 | 2.17 | 21.7 |"
# a result file without cells is refused, non-zero
echo '{"cells": {}}' > "$tmp/empty.json"
if python3 bench/scaling.py report --json "$tmp/empty.json" > "$tmp/empty.txt" 2>&1; then bad "an empty result file accepted"
else grep -q "has no results" "$tmp/empty.txt" && ok || bad "empty result file: message $(cat "$tmp/empty.txt")"; fi

# ---- a generated model ----
if [ ! -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]; then
    echo "SKIP: models/SmolLM2-135M-Instruct.Q4_1.gguf (the tokenizer's source) missing (scripts/setup.sh fetches it)"
    skip=$((skip + 1))
elif ! scripts/make_scale_models.sh --sizes tiny --out "$tmp/m" > "$tmp/gen.txt" 2>&1; then
    if ! .venv-scale/bin/python -c 'import gguf, numpy' 2>/dev/null; then
        echo "SKIP: the venv .venv-scale (gguf, numpy) could not be made: $(tail -1 "$tmp/gen.txt")"
        skip=$((skip + 1))
    else
        bad "make_scale_models --sizes tiny: $(tail -3 "$tmp/gen.txt")"
    fi
else
    gg="$tmp/m/llama-tiny-random-Q4_K.gguf"
    grep -q "vocab 49152" "$tmp/gen.txt" && [ -f "$gg" ] && ! [ -e "$gg.tmp" ] && ok || bad "generator output: $(cat "$tmp/gen.txt")"
    if .venv-scale/bin/python - "$gg" > "$tmp/stats.txt" 2>&1 <<'PY'
import sys
import numpy as np
from gguf import GGUFReader, quants
r = GGUFReader(sys.argv[1])
t = {x.name: x for x in r.tensors}
bad = []
for name in ("token_embd.weight", "output.weight", "blk.0.attn_q.weight", "blk.1.ffn_down.weight"):
    x = quants.dequantize(t[name].data, t[name].tensor_type)
    if t[name].tensor_type.name != "Q4_K":
        bad.append(f"{name}: {t[name].tensor_type.name}, not Q4_K")
    if not (np.isfinite(x).all() and abs(float(x.mean())) < 1e-3 and 0.017 < float(x.std()) < 0.023):
        bad.append(f"{name}: mean {x.mean():.3g} std {x.std():.3g}")
n = np.asarray(t["blk.1.ffn_norm.weight"].data)
if not (abs(float(n.mean()) - 1) < 0.01 and float(n.std()) < 0.05):
    bad.append(f"norm: mean {n.mean():.3g} std {n.std():.3g}")
rf = np.asarray(t["rope_freqs.weight"].data)
# llama3 scaling, head_dim 64, theta 5e5, factor 8: the highest frequencies kept (1), the lowest divided by 8
if not (rf.shape == (32,) and rf[0] == 1.0 and rf[-1] == 8.0 and np.all(np.diff(rf) >= 0)):
    bad.append(f"rope_freqs: {rf}")
print("; ".join(bad) if bad else "weights ok")
sys.exit(1 if bad else 0)
PY
    then ok; else bad "weights: $(cat "$tmp/stats.txt")"; fi
    if [ -x "$bin" ]; then
        "$bin" generate -m "$gg" -p "The capital of France is" -n 2 --temp 0 --ignore-eos > "$tmp/gen_out.txt" 2>&1 &&
            ok || bad "generate on the tiny model: $(tail -2 "$tmp/gen_out.txt")"
        printf '{"prompt": "Write a headline.\\n\\nSome article text about a thing that happened.", "completion": " A headline"}\n' > "$tmp/sft.jsonl"
        "$bin" train --task causal-lm -m "$gg" --train "$tmp/sft.jsonl" -o "$tmp/run" --max-steps 1 --batch 1 \
            --grad-accum 1 --no-plot -t 1 > "$tmp/train.txt" 2>&1 && ok || bad "train on the tiny model: $(tail -2 "$tmp/train.txt")"
        grep -q '"type":"train","step":1,.*"loss":[0-9]' "$tmp/run/metrics.jsonl" 2>/dev/null && ok ||
            bad "train: no finite step-1 loss in metrics.jsonl"
    else
        echo "SKIP: $bin missing (make test sets AFINAR_BIN)"
        skip=$((skip + 1))
    fi
fi
echo "RESULT check_scaling passed=$pass failed=$fail skipped=$skip"
[ $fail -eq 0 ]
