#!/usr/bin/env bash
# Agreement of the int8-activation decode with the exact f32 decode (bench/decode_agree.c) on each
# model, for each set of int8 product classes (mixed decode: the other products exact f32), as one
# markdown table: bench/results/decode_agreement.md (+ one JSON line per cell in
# bench/results/decode_agreement.jsonl). Targets (issue rule for any default decode path): top-1
# agreement >= 99% of >= 1,000 teacher-forced tokens, mean KL(p_f32 || p_int8) <= 1e-3 per token.
# Also the CPU ms per decode step of both contexts (they alternate step by step in one process).
#
# Usage: bench/decode_agreement.sh
#   env: MODELS ("models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-Q4_K_M.gguf"),
#        ROLES ("all": space-separated --int8-roles lists, e.g. "all qkv,o,gateup,down"),
#        TOKENS (1000), PER_PROMPT (128), THREADS (1), KERNEL (auto), OUT (bench/results),
#        BIN (build/bench/decode_agree; built with make when missing),
#        APPEND (1: add the cells to an existing decode_agreement.jsonl), RENDER (1: only re-make the
#        table from decode_agreement.jsonl)
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
mkdir -p "$OUT"
md=$OUT/decode_agreement.md
js=$OUT/decode_agreement.jsonl
cell=$(mktemp)
trap 'rm -f "$cell" "$js.tmp" "$md.tmp"' EXIT
if [ "${RENDER:-0}" != 1 ]; then
  [ -x "$BIN" ] || make -s "$BIN"
  if [ "${APPEND:-0}" = 1 ] && [ -f "$js" ]; then cp "$js" "$js.tmp"; else : > "$js.tmp"; fi
  for m in $MODELS; do
    [ -f "$m" ] || { echo "decode_agreement: $m missing (scripts/fetch_models.sh)" >&2; exit 1; }
    for r in $ROLES; do
      "$BIN" "$m" --tokens "$TOKENS" --per-prompt "$PER_PROMPT" --threads "$THREADS" --kernel "$KERNEL" \
        --int8-roles "$r" --json "$cell"
      cat "$cell" >> "$js.tmp"
    done
  done
  mv "$js.tmp" "$js"
fi
[ -s "$js" ] || { echo "decode_agreement: $js is missing or empty" >&2; exit 1; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
python3 - "$js" "$PER_PROMPT" "$cpu" > "$md.tmp" <<'PY'
import datetime, json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("# int8-activation decode vs exact f32 decode: agreement on held-out prompts\n")
print(f"{datetime.date.today()}, {sys.argv[3]}, {rows[0]['threads']} thread(s). Prompts: generic chat questions")
print(f"(chat template) + BBC News test headlines, {sys.argv[2]} tokens at most each; the int8 context is")
print("teacher-forced token by token on the exact path's greedy tokens (bench/decode_agree.c). CPU ms per decode")
print("step of both contexts, alternating step by step in one process. Targets: top-1 >= 99%, mean KL <= 1e-3.\n")
print("| model | kernel | int8 products | steps | top-1 agreement | mean KL | max KL | free-running prefix "
      "| CPU ms/step exact / int8 | targets |")
print("|---|---|---|---|---|---|---|---|---|---|")
for j in rows:
    ok = "met" if j["top1"] >= 0.99 and j["kl_mean"] <= 1e-3 else "missed"
    e, q = j["cpu_ms_exact"], j["cpu_ms_int8"]
    print(f"| {os.path.basename(j['model'])} | {j['kernel']} | {j['int8_roles']} | {j['steps']} | "
          f"{100 * j['top1']:.2f}% | {j['kl_mean']:.2e} | {j['kl_max']:.2e} | {100 * j['free_prefix']:.1f}% | "
          f"{e:.2f} / {q:.2f} ({e / q:.2f}x) | {ok} |")
PY
mv "$md.tmp" "$md"
cat "$md"
echo "decode_agreement: wrote $md and $js"
