#!/bin/sh
# check_architecture_doc.sh — docs/ARCHITECTURE.md places every source file (run by `make test`):
# each file under src/, cli/ and include/ (*.c, *.h; shaders excepted) is named on that page by
# its file name, so a new or moved file cannot go undocumented. Prints one line per file missing
# and the RESULT line (passed: files found named).
#   sh tests/check_architecture_doc.sh [REPO_ROOT]
root=${1:-.}
cd "$root" || { echo "RESULT check_architecture_doc passed=0 failed=1 skipped=0"; exit 1; }
doc=docs/ARCHITECTURE.md
[ -f "$doc" ] || { echo "FAIL: $doc absent"; echo "RESULT check_architecture_doc passed=0 failed=1 skipped=0"; exit 1; }
pass=0
fail=0
for f in $(find src cli include -name '*.c' -o -name '*.h' | LC_ALL=C sort); do
    b=$(basename "$f")
    stem=${b%.*}
    # named as "file.c", or as "stem.c/h" / "stem.h" / "stem.c" in a table cell
    if grep -qF "$b" "$doc" || grep -qF "$stem.c/h" "$doc"; then
        pass=$((pass + 1))
    else
        echo "FAIL $f: not named in $doc (place it in the module table)"
        fail=$((fail + 1))
    fi
done
echo "architecture page: $pass source files named, $fail missing"
echo "RESULT check_architecture_doc passed=$pass failed=$fail skipped=0"
[ "$fail" = 0 ]
