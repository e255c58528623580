#!/usr/bin/env bash
# run.sh — the device kit's one command (made by `make device-kit`; docs/VULKAN.md "Device kit").
# Runs from a copy of build/device-kit/ anywhere (nothing of the build tree is used) and writes
# under $OUT (default: ./out beside this script), at most 8 files:
#   summary.md     device, test results, the benchmark table (afinar --device vulkan / cpu and
#                  PyTorch + PEFT fp32 / bf16 autocast on the GPU), the main job's losses on both
#   devices.txt    `afinar devices`, nvidia-smi, vulkaninfo --summary (when present), CPU, kernel
#   tests.log      test_backend_ops, test_vulkan_model, test_vulkan_cli (full output)
#   bench.log      every benchmark command line and its stderr (with the AF_VULKAN_PROFILE tables:
#                  where the device's time goes in decode and in a training step)
#   main_cpu.jsonl, main_vulkan.jsonl   the main job's metrics.jsonl on each device
#   peft.jsonl     one JSON object per PyTorch run (or {"skipped": why})
# Environment:
#   KIT_QUICK=1     a small step count everywhere (CI on lavapipe: a few minutes on 2 cores);
#                   the SmolLM2 parts of the two model tests are skipped (AF_SMOLLM2=none)
#   KIT_BUDGET_S    wall-clock budget of the whole run (default 450 s: the device tool allows 10 min
#                   a call and 15 min a session; quick: 900 s); each step's timeout is cut to what is
#                   left, and a step that would start with < 15 s left is skipped (said in summary.md)
#   KIT_STEPS       the main job's optimizer steps (default 24: two evaluations on the validation
#                   slice, 12 steps of 16 samples an epoch; quick 2)
#   KIT_DEVICE      the Vulkan device (default: the first vulkan:N that is not a software device,
#                   else vulkan:0)
#   KIT_TESTS=0     skip the three test programs (a second, shorter call for the benchmarks)
#   KIT_PEFT=0      skip the PyTorch + PEFT runs (~100 s with their model builds; a rerun after a
#                   first call that has their figures)
# The Vulkan loader: when `ldconfig -p` lists no libvulkan.so.1, the packages of debs/ are unpacked
# as the device README says (dpkg -x into / as root, else into a private folder put on
# LD_LIBRARY_PATH); when afinar then sees no Vulkan device and VK_DRIVER_FILES is unset, the NVIDIA
# ICD file of the device machine (/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json) is named.
# Exit status: 0 when every test program passed (benchmark failures are reported in summary.md),
# 1 otherwise.
set -uo pipefail
KIT=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$KIT/out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$KIT"
# programs, libraries, model and data travel gzip-compressed (make_kit.sh); unpack them once, in place
while IFS= read -r z; do
  gzip -dc "$z" > "${z%.gz}" && chmod --reference="$z" "${z%.gz}" && rm -f "$z" ||
    { echo "run.sh: cannot unpack $z" >&2; exit 1; }
done < <(find . -name '*.gz' -type f)
QUICK=${KIT_QUICK:-0}
BUDGET=${KIT_BUDGET_S:-450}
[ "$QUICK" = 1 ] && BUDGET=${KIT_BUDGET_S:-900}
T0=$(date +%s)
WORK=$(mktemp -d /tmp/afinar_kit.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MODEL=$(ls "$KIT"/models/*.gguf 2>/dev/null | head -n 1)
[ -f "$MODEL" ] || { echo "run.sh: no model in $KIT/models" >&2; exit 1; }
SUM=$OUT/summary.md BLOG=$OUT/bench.log TLOG=$OUT/tests.log PJ=$OUT/peft.jsonl
: > "$BLOG"; : > "$TLOG"; : > "$PJ"
NOTES=()
say() { echo "run.sh [$(( $(date +%s) - T0 )) s] $*" >&2; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# cap N: a step's timeout, N seconds or what is left of the budget; empty when under 15 s are left
cap() { local l; l=$(left); [ "$l" -lt 15 ] && return 1; [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
# bench LABEL TIMEOUT CMD...: run CMD with stdout to $WORK/out.txt, stderr appended to bench.log
bench() {
  local label=$1 t rc; shift
  if ! t=$(cap "$1"); then NOTES+=("$label: skipped, the ${BUDGET} s budget was spent"); return 124; fi
  shift
  echo "== $label (timeout $t s): $*" >> "$BLOG"
  timeout -k 5 "$t" "$@" > "$WORK/out.txt" 2>> "$BLOG"
  rc=$?
  [ $rc -ne 0 ] && { echo "== $label: exit $rc" >> "$BLOG"; NOTES+=("$label: exit $rc (bench.log)"); }
  return $rc
}

# ---------------------------------------------------------------- the Vulkan loader and driver
LOADER="system"
if ! ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1' >/dev/null; then
  if [ "$(id -u)" = 0 ] && [ "${KIT_PRIVATE_LOADER:-0}" != 1 ]; then
    for f in debs/*.deb; do dpkg -x "$f" /; done
    ldconfig
    LOADER="unpacked from debs/ into / (dpkg -x)"
  else
    for f in debs/*.deb; do dpkg -x "$f" "$WORK/sys"; done
    export LD_LIBRARY_PATH="$WORK/sys/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    LOADER="unpacked from debs/ into a private folder (LD_LIBRARY_PATH)"
  fi
fi
has_vk() { ./afinar devices 2>/dev/null | grep '^  vulkan:[0-9]' >/dev/null; }
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
NV_EGL=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if ! has_vk && [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$NV_ICD" ]; then
  export VK_DRIVER_FILES=$NV_ICD
  [ -f "$NV_EGL" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$NV_EGL
  LOADER="$LOADER; VK_DRIVER_FILES=$NV_ICD"
fi
DEV=${KIT_DEVICE:-$(./afinar devices 2>/dev/null | awk '/^  vulkan:[0-9]/ && !/software/ {print $1; exit}')}
DEV=${DEV:-vulkan:0}
{
  echo "date: $(date -u +%FT%TZ); kit commit $(cat COMMIT 2>/dev/null); KIT_QUICK=$QUICK"
  echo "kernel: $(uname -srm); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
  echo "Vulkan loader: $LOADER; device used: $DEV"
  echo; echo "\$ afinar devices"; ./afinar devices 2>&1
  if command -v nvidia-smi >/dev/null; then echo; echo "\$ nvidia-smi"; timeout 20 nvidia-smi 2>&1; fi
  if command -v vulkaninfo >/dev/null; then echo; echo "\$ vulkaninfo --summary"; timeout 20 vulkaninfo --summary 2>&1; fi
} > "$OUT/devices.txt"
say "devices: $(grep -c '^  vulkan:' "$OUT/devices.txt") Vulkan; using $DEV ($LOADER)"

# ---------------------------------------------------------------- the three test programs
export AFINAR_BIN=$KIT/afinar AF_MODEL_DIR=$KIT/models
if [ "$QUICK" = 1 ]; then export AF_SMOLLM2=none; else export AF_SMOLLM2=$(basename "$MODEL"); fi
TRES=()
TFAIL=0
TCAP=150
[ "$QUICK" = 1 ] && TCAP=300 # lavapipe on a loaded 2-core machine
TESTS="test_backend_ops test_vulkan_model test_vulkan_cli"
[ "${KIT_TESTS:-1}" = 0 ] && TESTS="" && NOTES+=("test programs: not run (KIT_TESTS=0)")
for t in $TESTS; do
  if ! tt=$(cap $TCAP); then TRES+=("| $t | skipped: budget spent | |"); TFAIL=1; continue; fi
  s0=$(date +%s)
  echo "==== $t" >> "$TLOG"
  n0=$(wc -l < "$TLOG")
  timeout -k 5 "$tt" "./$t" >> "$TLOG" 2>&1
  rc=$?
  res=$(tail -n +"$((n0 + 1))" "$TLOG" | grep -a '^RESULT' | tail -n 1)
  [ $rc -ne 0 ] && TFAIL=1
  TRES+=("| $t | exit $rc: ${res:-no RESULT line} | $(( $(date +%s) - s0 )) |")
  say "$t: exit $rc ${res}"
done

# ---------------------------------------------------------------- benchmarks
if [ "$QUICK" = 1 ]; then
  NGEN=2 WORDS=4 CB=1 CA=1 CS=8 CSTEPS=2 LB=1 LS=8 LSTEPS=2 PSTEPS=2
else
  NGEN=64 WORDS=100 CB=8 CA=2 CS=128 CSTEPS=6 LB=4 LS=128 LSTEPS=6 PSTEPS=5
fi
tr -s ' \n' ' ' < prompt.txt | cut -d' ' -f1-"$WORDS" > "$WORK/prompt.txt"
# rate FILE FIELD: steady-state rate from metrics.jsonl's train records, step 1 excluded (pipeline
# creation, first touches): (FIELD at the last step - FIELD at step 1) / (elapsed last - elapsed 1);
# FIELD "samples" counts steps x SPS samples (SPS given as a third argument).
rate() {
  awk -v f="$2" -v sps="${3:-0}" -F'[,:{}]' '/"type":"train"/ {
      for (i = 1; i < NF; i++) { if ($i == "\"step\"") st = $(i+1); if ($i == "\"elapsed\"") el = $(i+1);
                                 if ($i == "\"num_tokens\"") nt = $(i+1) }
      n++; if (n == 1) { s1 = st; e1 = el; t1 = nt } ; sl = st; elast = el; tl = nt }
    END { if (n < 2 || elast <= e1) { print "?"; exit }
          v = (f == "samples") ? (sl - s1) * sps : (tl - t1); printf "%.4g\n", v / (elast - e1) }' "$1"
}
declare -A R
for d in cpu "$DEV"; do
  k=${d%%:*}
  # one token first: the pipelines are created (and saved in the pipeline cache) outside the timing
  bench "generate $d (warm-up)" 60 ./afinar generate -m "$MODEL" -f "$WORK/prompt.txt" -n 1 --temp 0 --device "$d"
  if bench "generate $d" 120 ./afinar generate -m "$MODEL" -f "$WORK/prompt.txt" -n "$NGEN" --temp 0 --ignore-eos \
       --device "$d" --timings; then
    line=$(grep '^timings:' "$BLOG" | tail -n 1)
    R[$k.pt]=$(echo "$line" | sed -n 's/^timings: prompt \([0-9]*\) tokens.*/\1/p')
    R[$k.ps]=$(echo "$line" | sed -n 's/^timings: prompt [0-9]* tokens [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p')
    R[$k.ds]=$(echo "$line" | sed -n 's/.*decode [0-9]* tokens [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p')
  fi
  if bench "train classification $d" 150 ./afinar train -m "$MODEL" --train data/bbc/train.jsonl \
       --labels data/bbc/labels.txt --recipe fixed --max-steps "$CSTEPS" --batch "$CB" --grad-accum "$CA" \
       --max-seq-len "$CS" --no-plot -o "$WORK/cls_$k" --overwrite --device "$d"; then
    R[$k.cls]=$(rate "$WORK/cls_$k/metrics.jsonl" samples $((CB * CA)))
  fi
  if bench "train causal-lm $d" 150 ./afinar train --task causal-lm -m "$MODEL" --train data/lm.jsonl \
       --recipe fixed --max-steps "$LSTEPS" --batch "$LB" --grad-accum 1 --max-seq-len "$LS" --no-plot \
       -o "$WORK/lm_$k" --overwrite --device "$d"; then
    R[$k.lm]=$(rate "$WORK/lm_$k/metrics.jsonl" tokens)
  fi
  say "bench $d: prompt ${R[$k.ps]:-?} tok/s, decode ${R[$k.ds]:-?} tok/s, cls ${R[$k.cls]:-?} samples/s, lm ${R[$k.lm]:-?} tokens/s"
done
# where the device's time goes (AF_VULKAN_PROFILE: GPU timestamps per shader, vk_prof.c), on the
# same decode and classification runs; the tables go to bench.log and summary.md
PROF=""
profile() { # LABEL CMD...: run CMD profiled, keep the table it prints
  local label=$1 n0; shift
  n0=$(wc -l < "$BLOG")
  local tab=""
  bench "profile: $label" 90 env AF_VULKAN_PROFILE=1 "$@" &&
    tab=$(tail -n +"$((n0 + 1))" "$BLOG" | grep -A 16 '^vulkan profile of' | sed 's/^/    /')
  if [ -n "$tab" ]; then PROF+=$'\n'"$label:"$'\n\n'"$tab"$'\n'
  else NOTES+=("profile: $label: no table (not a Vulkan device, or no timestamps: bench.log)"); fi
}
profile "decode ($NGEN tokens)" ./afinar generate -m "$MODEL" -f "$WORK/prompt.txt" -n "$NGEN" --temp 0 --ignore-eos \
  --device "$DEV"
[ "$QUICK" = 1 ] || profile "classification training ($CSTEPS steps)" ./afinar train -m "$MODEL" \
  --train data/bbc/train.jsonl --labels data/bbc/labels.txt --recipe fixed --max-steps "$CSTEPS" --batch "$CB" \
  --grad-accum "$CA" --max-seq-len "$CS" --no-plot -o "$WORK/prof_cls" --overwrite --device "$DEV"
# the model's shape for PyTorch, from the GGUF
hp() { ./afinar info "$MODEL" 2>/dev/null | awk -v k="$1" '$1 == k {print $2; exit}'; }
PSHAPE=(--layers "$(hp num_hidden_layers)" --hidden "$(hp hidden_size)" --inter "$(hp intermediate_size)"
        --heads "$(hp num_attention_heads)" --kv-heads "$(hp num_key_value_heads)" --vocab "$(hp vocab_size)"
        --rope-theta "$(hp rope_theta)" --rms-eps "$(hp rms_norm_eps)")
PY=${KIT_PYTHON:-python3}
if [ "${KIT_PEFT:-1}" = 0 ]; then
  echo '{"skipped": "KIT_PEFT=0"}' >> "$PJ"
  NOTES+=("PyTorch + PEFT: skipped (KIT_PEFT=0: a rerun; the first call of the session has its figures)")
elif "$PY" -c 'import torch, peft, transformers, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>> "$BLOG"; then
  for task in cls lm; do
    for dt in f32 bf16; do
      if [ $task = cls ]; then a=(--batch "$CB" --grad-accum "$CA" --seq "$CS" --targets qv --lora-top 10)
      else a=(--batch "$LB" --grad-accum 1 --seq "$LS" --targets all-linear --lora-top 0 --lr 2e-4); fi
      if bench "pytorch $task $dt" 120 "$PY" py/peft_gpu.py --task $task --dtype $dt "${PSHAPE[@]}" "${a[@]}" \
           --warmup 2 --steps "$PSTEPS"; then
        cat "$WORK/out.txt" >> "$PJ"
        R[pt.$task.$dt]=$(sed -n 's/.*"samples_per_s": \([0-9.e+-]*\).*"tokens_per_s": \([0-9.e+-]*\).*/\1 \2/p' "$WORK/out.txt")
      fi
    done
  done
else
  echo '{"skipped": "python3 has no torch + peft + transformers with a CUDA device"}' >> "$PJ"
  NOTES+=("PyTorch + PEFT: skipped (no torch/peft/transformers with CUDA in $PY)")
fi

# ---------------------------------------------------------------- the main job, fixed steps, both devices
# quick: 2 validation and 2 test articles of 8 tokens (lavapipe runs every token on the CPU)
VAL=data/bbc/val.jsonl TEST=data/bbc/test.jsonl
if [ "$QUICK" = 1 ]; then
  STEPS=${KIT_STEPS:-2} MJ=(--batch 1 --grad-accum 1 --max-seq-len 8)
  head -n 2 "$VAL" > "$WORK/val.jsonl"; head -n 2 "$TEST" > "$WORK/test.jsonl"
  VAL=$WORK/val.jsonl TEST=$WORK/test.jsonl
else STEPS=${KIT_STEPS:-24} MJ=(); fi
declare -A MW MA
for d in cpu "$DEV"; do
  k=${d%%:*}
  s0=$(date +%s.%N)
  if bench "main job train $d" 180 ./afinar train -m "$MODEL" --train data/bbc/train.jsonl --val "$VAL" \
       --labels data/bbc/labels.txt --recipe fixed --max-steps "$STEPS" "${MJ[@]}" --lora-dropout 0 --no-plot \
       -o "$WORK/main_$k" --overwrite --device "$d"; then
    cp "$WORK/main_$k/metrics.jsonl" "$OUT/main_$k.jsonl"
    a=best; [ -d "$WORK/main_$k/best" ] || a=final
    if bench "main job eval $d" 120 ./afinar eval -m "$MODEL" -a "$WORK/main_$k/$a" --data "$TEST" \
         --device "$d" --json "$WORK/eval_$k.json"; then
      MA[$k]=$(sed -n 's/.*"accuracy":[[:space:]]*\([0-9.e+-]*\).*/\1/p' "$WORK/eval_$k.json" | head -n 1)
    fi
    MW[$k]=$(awk -v a="$s0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  fi
  say "main job $d: ${MW[$k]:-?} s, test accuracy ${MA[$k]:-?}"
done
# the two loss curves side by side
losses() { sed -n 's/.*"type":"train","step":\([0-9]*\),[^}]*"loss":\([0-9.e+-]*\).*/\1 \2/p' "$1" 2>/dev/null; }
losses "$OUT/main_cpu.jsonl" > "$WORK/lc"
losses "$OUT/main_vulkan.jsonl" > "$WORK/lv"
LOSSTAB=$(awk 'NR == FNR {c[$1] = $2; next} ($1 in c) {a = c[$1]; d = $2 - a; if (d < 0) d = -d;
  r = (a != 0) ? d / (a < 0 ? -a : a) : d; if (r > m) m = r; n++
  printf "| %d | %.7f | %.7f | %.2e |\n", $1, a, $2, r} END {if (n) printf "MAXREL %.3g\n", m}' "$WORK/lc" "$WORK/lv")
MAXREL=$(echo "$LOSSTAB" | sed -n 's/^MAXREL //p')

# ---------------------------------------------------------------- summary.md
v() { echo "${R[$1]:-?}"; }
{
  echo "# Device kit results ($(head -n 1 "$OUT/devices.txt" | cut -d';' -f1 | sed 's/date: //'))"
  echo
  sed -n '2,3p' "$OUT/devices.txt" | sed 's/^/    /'
  ./afinar devices 2>/dev/null | sed -n '/^vulkan/,$p' | sed 's/^/    /'
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/    nvidia-smi: /'
  echo
  echo "## Tests"
  echo
  echo "| program | result | s |"; echo "|---|---|---|"
  printf '%s\n' "${TRES[@]}"
  echo
  echo "## Speed ($(basename "$MODEL"): SmolLM2-135M-Instruct's first $(hp num_hidden_layers) blocks, ffn_down Q3_K, other weights Q4_0)"
  echo
  echo "Generate: $(v cpu.pt) prompt tokens, $NGEN greedy tokens. Classification: --recipe fixed, $CB x $CA samples"
  echo "of $CS tokens per step, LoRA q,v on the top 10 layers; causal-LM: $LB x $LS tokens per step, all-linear on"
  echo "every layer. Rates are steady-state (step 1 excluded). PyTorch + PEFT: the same shapes and LoRA placement,"
  echo "random weights (py/peft_gpu.py), $PSTEPS timed steps after 2 warm-up steps."
  echo
  echo "| system | prompt tok/s | decode tok/s | classification samples/s | causal-LM tokens/s |"
  echo "|---|---|---|---|---|"
  echo "| afinar --device $DEV | $(v vulkan.ps) | $(v vulkan.ds) | $(v vulkan.cls) | $(v vulkan.lm) |"
  echo "| afinar --device cpu ($(nproc) threads) | $(v cpu.ps) | $(v cpu.ds) | $(v cpu.cls) | $(v cpu.lm) |"
  for dt in f32 bf16; do
    echo "| PyTorch + PEFT, GPU, $dt$( [ $dt = bf16 ] && echo ' autocast') | | | $(echo "${R[pt.cls.$dt]:-?}" | cut -d' ' -f1) | $(echo "${R[pt.lm.$dt]:-? ?}" | cut -d' ' -f2) |"
  done
  wb=$(stat -c %s "$MODEL")
  echo
  echo "Decode bandwidth floor: the weights are $((wb / 1048576)) MiB read once per token; at B GB/s the floor is"
  echo "B·1e9 / $wb tok/s (H100 SXM HBM3 ~3000 GB/s measured by the device README: $(awk -v b="$wb" 'BEGIN {printf "%.0f", 3.0e12 / b}') tok/s)."
  echo
  echo "## Main job: BBC News slice ($(wc -l < data/bbc/train.jsonl) train, $(wc -l < "$VAL") val, $(wc -l < "$TEST") test), --recipe fixed${MJ[*]:+ ${MJ[*]}}, $STEPS steps, dropout 0"
  echo
  echo "| device | train + eval wall s | test accuracy |"; echo "|---|---|---|"
  echo "| $DEV | ${MW[vulkan]:-?} | ${MA[vulkan]:-?} |"
  echo "| cpu | ${MW[cpu]:-?} | ${MA[cpu]:-?} |"
  echo
  echo "Losses per step (largest relative difference ${MAXREL:-?}):"
  echo
  echo "| step | loss cpu | loss $DEV | rel. diff |"; echo "|---|---|---|---|"
  echo "$LOSSTAB" | grep '^|'
  echo
  if [ -n "$PROF" ]; then
    echo "## Profile of $DEV (AF_VULKAN_PROFILE: GPU timestamps after every command, totals per shader)"
    echo "$PROF"
  fi
  if [ ${#NOTES[@]} -gt 0 ]; then echo "## Notes"; echo; printf -- '- %s\n' "${NOTES[@]}"; echo; fi
  echo "Whole run: $(( $(date +%s) - T0 )) s (budget $BUDGET s)."
} > "$SUM"
say "done in $(( $(date +%s) - T0 )) s: $SUM"
cat "$SUM"
exit $TFAIL
