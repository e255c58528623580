#!/bin/sh
# check_exports.sh — what libafinar.so exports is the public API (run by `make test`): every
# dynamic symbol the library defines (nm -D --defined-only) is a function declared AF_API in
# include/afinar.h or include/afinar_app.h, and every function declared there is exported (callers
# such as Python's ctypes find it). The library is built with -fvisibility=hidden, so an internal
# function (vk_*, srv_*, engine_*, af_tr_* ...) that leaks out, or a public one whose definition
# lost its declaration, fails here. Prints one line per violation and the RESULT line
# (passed: symbols checked and found fine).
#   sh tests/check_exports.sh [LIBRARY]   (default: the libafinar.so next to $AFINAR_BIN, else build/)
lib=${1:-$(dirname "${AFINAR_BIN:-build/afinar}")/libafinar.so}
skip() { echo "SKIP: $1"; echo "RESULT check_exports passed=0 failed=0 skipped=1"; exit 0; }
[ -f "$lib" ] || skip "$lib absent (make builds it)"
command -v nm >/dev/null 2>&1 || skip "nm not installed (binutils)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/afinar_exports_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# declared: the name before the first '(' of each AF_API declaration
sed -n 's/^AF_API .*[^a-zA-Z0-9_]\(af_[a-z0-9_]*\)(.*/\1/p' include/afinar.h include/afinar_app.h | LC_ALL=C sort -u > "$tmp/declared"
# exported: defined dynamic symbols, without the toolchain's own (_init, _fini, __bss_start ...)
nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | grep -v '^_' | LC_ALL=C sort -u > "$tmp/exported"
[ -s "$tmp/declared" ] || { echo "FAIL: no AF_API declaration found in include/"; echo "RESULT check_exports passed=0 failed=1 skipped=0"; exit 1; }
fail=0
for s in $(LC_ALL=C comm -13 "$tmp/declared" "$tmp/exported"); do
    echo "FAIL $lib exports $s, which include/afinar.h and include/afinar_app.h do not declare AF_API"
    fail=$((fail + 1))
done
for s in $(LC_ALL=C comm -23 "$tmp/declared" "$tmp/exported"); do
    echo "FAIL $s is declared AF_API but $lib does not export it (its definition does not see the declaration?)"
    fail=$((fail + 1))
done
pass=$(LC_ALL=C comm -12 "$tmp/declared" "$tmp/exported" | wc -l)
echo "exports of $(basename "$lib"): $pass public functions exported, $fail violations"
echo "RESULT check_exports passed=$pass failed=$fail skipped=0"
[ "$fail" = 0 ]
