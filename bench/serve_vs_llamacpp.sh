#!/usr/bin/env bash
# `afinar serve` vs llama.cpp's own server (`llama-server`, C++, continuous batching, per-request
# LoRA) on the same GGUF and threads: bench/serve_vs_llamacpp.py (1/4/8/16 clients, mixed prompt
# lengths, without and with two adapters). Writes bench/results/serve_vs_llamacpp.{md,json}.
#
# Usage: bench/serve_vs_llamacpp.sh [extra args for bench/serve_vs_llamacpp.py]
#   env: MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf), AFINAR (build/afinar), THREADS (2),
#        SERVERS (afinar,llama-server; add llamacpp for llama-cpp-python's Python server),
#        PY (python3), OUT (bench/results/serve_vs_llamacpp)
# First run: builds llama-server natively from the llama.cpp source of the pinned llama-cpp-python
# sdist (scripts/setup_llama_server.sh, 5-20 min on 2 cores); with SERVERS naming llamacpp, also
# .venv-bench with llama-cpp-python (scripts/setup_llamacpp.sh NATIVE=1) and the server's packages
# (bench/requirements-server.txt). Needs a quiet machine for figures worth keeping: the full run
# (2 servers x 2 adapter modes x 1/4/8/16 clients x 32 requests of up to 1,024 + 64 tokens) takes
# about 20-40 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
AFINAR=${AFINAR:-build/afinar}
THREADS=${THREADS:-2}
SERVERS=${SERVERS:-afinar,llama-server}
PY=${PY:-python3}
OUT=${OUT:-bench/results/serve_vs_llamacpp}
VENV=.venv-bench
[ -f "$MODEL" ] || { echo "serve_vs_llamacpp: $MODEL missing (scripts/fetch_models.sh)" >&2; exit 1; }
[ -x "$AFINAR" ] || { echo "serve_vs_llamacpp: $AFINAR not built (make)" >&2; exit 1; }
case ",$SERVERS," in *,llama-server,*)
  PY="$PY" bash scripts/setup_llama_server.sh .llama-server || { echo "serve_vs_llamacpp: llama-server build failed" >&2; exit 1; } ;;
esac
case ",$SERVERS," in *,llamacpp,*)
  NATIVE=1 PY="$PY" bash scripts/setup_llamacpp.sh "$VENV" || { echo "serve_vs_llamacpp: llama-cpp-python build failed" >&2; exit 1; }
  if ! "$VENV/bin/python" -c 'import llama_cpp.server.app, uvicorn, sse_starlette, starlette_context' 2>/dev/null; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r bench/requirements-server.txt
  fi ;;
esac
exec "$PY" bench/serve_vs_llamacpp.py --afinar "$AFINAR" --model "$MODEL" --threads "$THREADS" --servers "$SERVERS" \
  --llama-server .llama-server/bin/llama-server --llamacpp-python "$VENV/bin/python" --out "$OUT" "$@"
