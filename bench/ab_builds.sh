#!/usr/bin/env bash
# A/B speed of several afinar builds on the same machine in one run (interleaved, order reversed
# every other repetition): `afinar generate` prompt and decode tok/s (--timings), and a short
# `afinar train` (classification, BBC News) wall time and samples/s; checks that the builds agree
# bit for bit (greedy text, trained adapter bytes).
#
# Usage: bench/ab_builds.sh NAME=BUILD_DIR [NAME=BUILD_DIR ...]
#   e.g. bench/ab_builds.sh before=/tmp/old/build after=build
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), THREADS (2), REPS (3), NDECODE (128),
#        TRAIN_N (64 training lines of data/bbc/train.jsonl), TRAIN_STEPS (4; batch 8 x grad-accum 2,
#        128 tokens, defaults otherwise; exact f32 products: `--frozen-precision f32` for a build
#        that has the flag, unless TRAIN_ARGS names it), TRAIN_ARGS (extra train flags), OUT (stdout only when
#        unset: the Markdown table; OUT=FILE also writes it there), WORK (/tmp/ab_builds)
# Each BUILD_DIR needs BUILD_DIR/afinar. Nothing else should run meanwhile; the 1-minute load
# average before and after is printed with the table. Medians over REPS.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
NDECODE=${NDECODE:-128}
TRAIN_N=${TRAIN_N:-64}
TRAIN_STEPS=${TRAIN_STEPS:-4}
TRAIN_ARGS=${TRAIN_ARGS:-}
WORK=${WORK:-/tmp/ab_builds}
me=ab_builds
die() { echo "$me: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: bench/ab_builds.sh NAME=BUILD_DIR [NAME=BUILD_DIR ...]"
[ -f "$MODEL" ] || die "model $MODEL missing (scripts/fetch_models.sh)"
[ -f data/bbc/train.jsonl ] || die "data/bbc/train.jsonl missing (scripts/fetch_data.sh)"
NAMES=(); BINS=(); PREC=()
for a in "$@"; do
  n=${a%%=*}; b=${a#*=}
  [ "$n" != "$a" ] && [ -n "$n" ] || die "argument '$a': expected NAME=BUILD_DIR"
  [ -x "$b/afinar" ] || die "$b/afinar: not an executable (build it: make BUILD=$b cli)"
  NAMES+=("$n"); BINS+=("$(cd "$b" && pwd)/afinar")
  # builds that choose the frozen products' precision: exact f32, as builds before the flag
  if [[ "$TRAIN_ARGS" != *frozen-precision* ]] && "$b/afinar" train --help 2>&1 | grep -q -- --frozen-precision; then
    PREC+=("--frozen-precision f32"); else PREC+=(""); fi
done
rm -rf "$WORK"; mkdir -p "$WORK/runs"
head -n "$TRAIN_N" data/bbc/train.jsonl > "$WORK/train.jsonl"
cp bench/prompt_128.txt "$WORK/prompt.txt"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
# one untimed warm-up per build (page cache)
for i in "${!BINS[@]}"; do
  "${BINS[i]}" generate -m "$MODEL" -f "$WORK/prompt.txt" -n 4 --temp 0 -t "$THREADS" >/dev/null 2>&1 \
    || die "${NAMES[i]}: generate failed"
done
for rep in $(seq 1 "$REPS"); do
  idx=("${!BINS[@]}")
  if [ $((rep % 2)) = 0 ]; then rev=(); for ((k = ${#idx[@]} - 1; k >= 0; k--)); do rev+=("${idx[k]}"); done; idx=("${rev[@]}"); fi
  for i in "${idx[@]}"; do
    p="$WORK/runs/${NAMES[i]}-gen-$rep"
    "${BINS[i]}" generate -m "$MODEL" -f "$WORK/prompt.txt" -n "$NDECODE" --temp 0 --ignore-eos \
      -t "$THREADS" --timings > "$p.out" 2> "$p.err" || die "${NAMES[i]}: generate failed: $(tail -3 "$p.err")"
    p="$WORK/runs/${NAMES[i]}-train-$rep"
    rm -rf "$p.dir"
    s=$(date +%s.%N)
    # shellcheck disable=SC2086
    "${BINS[i]}" train -m "$MODEL" --train "$WORK/train.jsonl" --labels data/bbc/labels.txt -o "$p.dir" \
      --max-steps "$TRAIN_STEPS" --batch 8 --grad-accum 2 --max-seq-len 128 -t "$THREADS" ${PREC[i]} $TRAIN_ARGS \
      > "$p.out" 2> "$p.err" || die "${NAMES[i]}: train failed: $(tail -3 "$p.err")"
    e=$(date +%s.%N)
    echo "$s $e" > "$p.time"
    echo "$me: rep $rep ${NAMES[i]}: $(grep -o 'timings:.*' "$WORK/runs/${NAMES[i]}-gen-$rep.err" | tail -1);" \
         "train $(awk '{printf "%.1f", $2 - $1}' "$p.time") s" >&2
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$WORK" "$REPS" "$TRAIN_STEPS" "$LOAD_BEFORE" "$LOAD_AFTER" "$MODEL" "$THREADS" "${NAMES[@]}" <<'EOF' | tee "${OUT:-/dev/null}"
import hashlib, os, re, statistics, sys
work, reps, steps, lb, la, model, threads = sys.argv[1:8]
names = sys.argv[8:]
reps, steps = int(reps), int(steps)
def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]
rows = []
for n in names:
    pr, de, tr, gsha, asha = [], [], [], set(), set()
    for r in range(1, reps + 1):
        err = open(f"{work}/runs/{n}-gen-{r}.err").read()
        m = re.findall(r"prompt (\d+) tokens [\d.]+ s \(([\d.]+) tok/s\), decode (\d+) tokens [\d.]+ s \(([\d.]+) tok/s\)", err)
        pr.append(float(m[-1][1])); de.append(float(m[-1][3]))
        gsha.add(sha(f"{work}/runs/{n}-gen-{r}.out"))
        s, e = map(float, open(f"{work}/runs/{n}-train-{r}.time").read().split())
        tr.append(e - s)
        ad = f"{work}/runs/{n}-train-{r}.dir/final/adapter_model.safetensors"
        asha.add(sha(ad) if os.path.exists(ad) else "missing")
    rows.append((n, statistics.median(pr), statistics.median(de), statistics.median(tr),
                 ",".join(sorted(gsha)), ",".join(sorted(asha))))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"CPU: {cpu}, {os.cpu_count()} cores; model {model}; {threads} threads; medians of {reps} interleaved runs")
print(f"load average before: {lb}; after: {la}\n")
print(f"| build | prompt tok/s | decode tok/s | train wall s ({steps} steps x 16 samples) | train samples/s | greedy text sha | adapter sha |")
print("|---|---:|---:|---:|---:|---|---|")
for n, p, d, t, g, a in rows:
    print(f"| {n} | {p:.1f} | {d:.1f} | {t:.1f} | {steps * 16 / t:.2f} | {g} | {a} |")
base = rows[0]
print()
for n, p, d, t, g, a in rows[1:]:
    print(f"- {n} / {base[0]}: prompt {p / base[1]:.2f}x, decode {d / base[2]:.2f}x, training {base[3] / t:.2f}x (speed ratio)")
EOF
