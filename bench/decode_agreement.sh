#!/usr/bin/env bash
# Agreement of the int8-activation decode with the exact f32 decode (bench/decode_agree.c) on each
# model, for each set of int8 product classes (mixed decode: the other products exact f32), as one
# markdown table: bench/results/decode_agreement.md (+ one JSON line per cell in
# bench/results/decode_agreement.jsonl). Targets (issue rule for any default decode path): top-1
# agreement >= 99% of >= 1,000 teacher-forced tokens, mean KL(p_f32 || p_int8) <= 1e-3 per token.
#
# Usage: bench/decode_agreement.sh
#   env: MODELS ("models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-Q4_K_M.gguf"),
#        ROLES ("all": space-separated --int8-roles lists, e.g. "all qkv,o,gateup,down"),
#        TOKENS (1000), PER_PROMPT (128), THREADS (1), KERNEL (auto), OUT (bench/results),
#        BIN (build/bench/decode_agree; built with make when missing)
# Run time: ~1 min per cell for SmolLM2 at 1 thread on a Zen 4, ~3 min for Gemma 3 270M.
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${MODELS:-"models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-Q4_K_M.gguf"}
ROLES=${ROLES:-all}
TOKENS=${TOKENS:-1000}
PER_PROMPT=${PER_PROMPT:-128}
THREADS=${THREADS:-1}
KERNEL=${KERNEL:-auto}
OUT=${OUT:-bench/results}
BIN=${BIN:-build/bench/decode_agree}
[ -x "$BIN" ] || make -s "$BIN"
mkdir -p "$OUT"
md=$OUT/decode_agreement.md
js=$OUT/decode_agreement.jsonl
tmp_md=$(mktemp) tmp_js=$(mktemp) cell=$(mktemp)
trap 'rm -f "$tmp_md" "$tmp_js" "$cell" "$cell.txt"' EXIT
{
  echo "# int8-activation decode vs exact f32 decode: agreement on held-out prompts"
  echo
  echo "$(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), kernel $KERNEL, $THREADS thread(s);"
  echo "prompts: generic chat questions (chat template) + BBC News test headlines; $PER_PROMPT tokens at most each;"
  echo "the int8 context teacher-forced token by token on the exact path's greedy tokens (bench/decode_agree.c)."
  echo "Targets: top-1 >= 99%, mean KL <= 1e-3."
  echo
  echo "| model | int8 products | steps | top-1 agreement | mean KL | max KL | free-running prefix | targets |"
  echo "|---|---|---|---|---|---|---|---|"
} > "$tmp_md"
for m in $MODELS; do
  [ -f "$m" ] || { echo "decode_agreement: $m missing (scripts/fetch_models.sh)" >&2; exit 1; }
  for r in $ROLES; do
    "$BIN" "$m" --tokens "$TOKENS" --per-prompt "$PER_PROMPT" --threads "$THREADS" --kernel "$KERNEL" \
      --int8-roles "$r" --json "$cell" | tee "$cell.txt"
    cat "$cell" >> "$tmp_js"
    python3 - "$cell" "$m" "$r" >> "$tmp_md" <<'EOF'
import json, sys, os
j = json.load(open(sys.argv[1]))
ok = "met" if j["top1"] >= 0.99 and j["kl_mean"] <= 1e-3 else "missed"
print(f"| {os.path.basename(sys.argv[2])} | {sys.argv[3]} | {j['steps']} | {100*j['top1']:.2f}% | {j['kl_mean']:.2e} | "
      f"{j['kl_max']:.2e} | {100*j['free_prefix']:.1f}% | {ok} |")
EOF
  done
done
mv "$tmp_md" "$md"
mv "$tmp_js" "$js"
echo "decode_agreement: wrote $md and $js"
