#!/usr/bin/env bash
# `afinar serve` vs llama.cpp's OpenAI-compatible server (llama-cpp-python's llama_cpp.server) on
# the same GGUF and threads: bench/serve_vs_llamacpp.py (1/4/8/16 clients, mixed prompt lengths,
# without and with two adapters). Writes bench/results/serve_vs_llamacpp.{md,json}.
#
# Usage: bench/serve_vs_llamacpp.sh [extra args for bench/serve_vs_llamacpp.py]
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), AFINAR (build/afinar), THREADS (2),
#        PY (python3 used to create .venv-bench), OUT (bench/results/serve_vs_llamacpp)
# First run: creates .venv-bench with llama-cpp-python built for this CPU (scripts/setup_llamacpp.sh
# NATIVE=1, as bench/run_decode.sh; 10-30 min on 2 cores) and adds the server's packages
# (bench/requirements-server.txt). Needs a quiet machine for figures worth keeping: the full run
# (2 servers x 2 adapter modes x 1/4/8/16 clients x 32 requests of up to 1,024 + 64 tokens) takes
# about 20-40 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
AFINAR=${AFINAR:-build/afinar}
THREADS=${THREADS:-2}
PY=${PY:-python3}
OUT=${OUT:-bench/results/serve_vs_llamacpp}
VENV=.venv-bench
[ -f "$MODEL" ] || { echo "serve_vs_llamacpp: $MODEL missing (scripts/fetch_models.sh)" >&2; exit 1; }
[ -x "$AFINAR" ] || { echo "serve_vs_llamacpp: $AFINAR not built (make)" >&2; exit 1; }
NATIVE=1 PY="$PY" bash scripts/setup_llamacpp.sh "$VENV" || { echo "serve_vs_llamacpp: llama-cpp-python build failed" >&2; exit 1; }
if ! "$VENV/bin/python" -c 'import llama_cpp.server.app, uvicorn, sse_starlette, starlette_context' 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r bench/requirements-server.txt
fi
exec "$PY" bench/serve_vs_llamacpp.py --afinar "$AFINAR" --model "$MODEL" --threads "$THREADS" \
  --llamacpp-python "$VENV/bin/python" --out "$OUT" "$@"
