#!/usr/bin/env bash
# Fetch real tokenizer vocabularies (no weights) for the chat-template and pre-tokenizer checks
# into vocab/ (git-ignored). Source: the llama-cpp-python sdist on PyPI, which bundles llama.cpp's
# models/ggml-vocab-*.gguf (vocabulary-only GGUFs converted from the models' own tokenizer.json /
# tokenizer.model) and their .inp/.out test pairs (ids written by the Hugging Face tokenizer of each
# model). Files taken:
#   ggml-vocab-llama-bpe.gguf  Llama 3 (128,256 tokens, pre llama-bpe)
#   ggml-vocab-qwen2.gguf      Qwen2 (151,936 tokens, pre qwen2)
#   ggml-vocab-phi-3.gguf      Phi-3 (32,064 tokens, SentencePiece)
#   ggml-vocab-llama-spm.gguf  Llama 2 (32,000 tokens, SentencePiece; the [INST] layout's tokenizer)
# each with .inp/.out. Every file is checked by SHA-256. Idempotent; needs only pip + tar.
# Usage: scripts/fetch_vocab.sh [DIR]   (default vocab/; tests read AF_VOCAB_DIR or vocab/)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-vocab}
PY=.venv/bin/python; [ -x "$PY" ] || PY=python3
VER=0.3.36
SDIST_SHA=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
FILES="
97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e ggml-vocab-llama-bpe.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-llama-bpe.gguf.inp
118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b ggml-vocab-llama-bpe.gguf.out
44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c ggml-vocab-qwen2.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-qwen2.gguf.inp
de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363 ggml-vocab-qwen2.gguf.out
967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326 ggml-vocab-phi-3.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-phi-3.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29 ggml-vocab-phi-3.gguf.out
16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69 ggml-vocab-llama-spm.gguf
be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0 ggml-vocab-llama-spm.gguf.inp
ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29 ggml-vocab-llama-spm.gguf.out
"
ok() { # all files present with their hashes
  echo "$FILES" | while read -r sha f; do
    [ -n "$f" ] || continue
    [ -f "$DIR/$f" ] && [ "$(sha256sum "$DIR/$f" | cut -d' ' -f1)" = "$sha" ] || { echo missing; break; }
  done | grep -q missing && return 1 || return 0
}
if ok; then echo "fetch_vocab: $DIR ok"; exit 0; fi
mkdir -p "$DIR"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "fetch_vocab: llama-cpp-python $VER sdist (PyPI)"
"$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation --disable-pip-version-check \
  "llama-cpp-python==$VER" -d "$tmp" 2>/dev/null ||
  "$PY" -m pip download -q --no-deps --no-binary :all: --disable-pip-version-check "llama-cpp-python==$VER" -d "$tmp"
sd="$tmp/llama_cpp_python-$VER.tar.gz"
[ "$(sha256sum "$sd" | cut -d' ' -f1)" = "$SDIST_SHA" ] || { echo "fetch_vocab: $sd: hash mismatch" >&2; exit 1; }
names=$(echo "$FILES" | awk 'NF {print "llama_cpp_python-'"$VER"'/vendor/llama.cpp/models/" $2}')
# shellcheck disable=SC2086
tar -xzf "$sd" -C "$tmp" $names
for f in $(echo "$FILES" | awk 'NF {print $2}'); do
  mv "$tmp/llama_cpp_python-$VER/vendor/llama.cpp/models/$f" "$DIR/$f.part" && mv "$DIR/$f.part" "$DIR/$f"
done
ok || { echo "fetch_vocab: $DIR: size/hash mismatch after extraction" >&2; exit 1; }
echo "fetch_vocab: $DIR ok"
