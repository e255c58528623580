#!/usr/bin/env bash
# Data-parallel training on SmolLM2-135M (Q4_1): the same few steps with the one-process binary
# (plain `afinar train`), `mpirun -np 1` and `mpirun -np 2`, for the classification main job's
# settings (BBC News, LoRA qv top10 r16, batch 8 x grad-accum 2) and the SFT job's (BBC headlines,
# causal LM, LoRA all-linear on all 30 layers, packed 8 x 256 tokens, grad-accum 2). Prints the
# SHA-256 of every final adapter and, per step, compute_s / comm_s / comm_bytes of rank 0 from
# metrics.jsonl. The total thread count is the same in every run (THREADS for one process,
# THREADS/np per rank).
#   bash bench/dist_smollm2.sh [OUT_DIR] [STEPS]     (needs models/ and data/ from scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/afinar_dist_bench}
STEPS=${2:-3}
THREADS=${THREADS:-2}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo"
mkdir -p "$OUT"
CLS=(-m "$MODEL" --train data/bbc/train.jsonl --labels data/bbc/labels.txt --max-steps "$STEPS" --no-plot
     --overwrite --save-every 1000)
SFT=(--task causal-lm -m "$MODEL" --train data/bbc_headlines/train.jsonl --max-seq-len 256 --batch ${SFT_BATCH:-8}
     --grad-accum 2 --targets all-linear --lora-layers all --max-steps "$STEPS" --no-plot --overwrite --save-every 1000)
summary() { # name dir
  local sha
  sha=$(sha256sum "$2/final/adapter_model.safetensors" | cut -c1-16)
  python3 - "$1" "$2" "$sha" <<'PY'
import json, sys
name, d, sha = sys.argv[1:]
rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"type":"train"' in l]
per = "; ".join("step %d: loss %.6f compute %.2f s comm %.3f s %.2f MB" % (r["step"], r["loss"], r.get("compute_s", -1),
                r.get("comm_s", 0), r.get("comm_bytes", 0) / 1e6) for r in rows)
print("%-10s sha256 %s  %s" % (name, sha, per))
PY
}
for job in ${JOBS:-cls sft}; do
  if [ $job = cls ]; then A=("${CLS[@]}"); else A=("${SFT[@]}"); fi
  build/afinar train "${A[@]}" -t "$THREADS" -o "$OUT/${job}_plain" > "$OUT/${job}_plain.log" 2>&1
  summary "${job}_plain" "$OUT/${job}_plain"
  for np in 1 2; do
    $MPIRUN -np $np build/afinar train "${A[@]}" -t $((THREADS / np > 0 ? THREADS / np : 1)) -o "$OUT/${job}_np$np" \
      > "$OUT/${job}_np$np.log" 2>&1
    summary "${job}_np$np" "$OUT/${job}_np$np"
  done
done
