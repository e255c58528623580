#!/bin/sh
# Make the Hugging Face checkpoint directories that tests/test_hf.c and tests/test_tokenizer.c use
# when present (they skip with a message otherwise):
#   models/SmolLM2-135M-Instruct-hf/   config.json, 3 float32 SafeTensors shards + index,
#                                      tokenizer.json, tokenizer_config.json, chat_template.jinja,
#                                      ref_logits.bin (transformers' logits and greedy ids)
#   models/gemma-3-270m-hf-tok/        tokenizer files only
# all written by transformers itself from the GGUFs in models/ (scripts/fetch_models.sh), with the
# reference venv (.venv-ref, tests/ref/requirements.txt). Usage: scripts/make_hf_dirs.sh [PYTHON]
# (default .venv-ref/bin/python). The committed tiny fixtures (tests/fixtures/hf_tiny_*) are
# remade with: PYTHON tests/ref/make_hf_dirs.py tiny
set -eu
cd "$(dirname "$0")/.."
PY=${1:-.venv-ref/bin/python}
if ! "$PY" -c 'import transformers, torch, tokenizers' 2>/dev/null; then
  echo "make_hf_dirs: $PY has no transformers/torch/tokenizers; create the reference venv:" >&2
  echo "  python3 -m venv .venv-ref && .venv-ref/bin/pip install -r tests/ref/requirements.txt" >&2
  exit 1
fi
for f in SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-Q4_K_M.gguf; do
  [ -f "models/$f" ] || { echo "make_hf_dirs: models/$f missing (scripts/fetch_models.sh)" >&2; exit 1; }
done
exec "$PY" tests/ref/make_hf_dirs.py real
