#!/usr/bin/env bash
# Random-weight Q4_K llama GGUFs in the Llama-3.2-1B / 3B and Llama-3.1-8B shapes, into models/scale/
# (ignored by git; ~0.6, 1.7 and 4.2 GB), for bench/scaling.sh. Creates the venv .venv-scale (the
# `gguf` and `numpy` PyPI packages, scripts/requirements-scale.txt) when it is missing.
# Usage: scripts/make_scale_models.sh [--sizes 1b,3b,8b] [--out DIR] [--force]
#   (the options of scripts/make_scale_models.py; the tokenizer comes from SmolLM2's GGUF)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-scale}
if ! { [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import gguf, numpy' 2>/dev/null; }; then
  echo "make_scale_models: creating $VENV (scripts/requirements-scale.txt)"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r scripts/requirements-scale.txt
fi
[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ] || scripts/fetch_models.sh
exec "$VENV/bin/python" scripts/make_scale_models.py "$@"
