#!/bin/sh
# check_layers.sh — the include layering of the library and the CLI (run by `make test`).
#
# Layers, lowest first (a folder of src/ is named by its first path component: kernels/cpu is
# kernels):
#   0 core
#   1 kernels, formats, tokenizer
#   2 model, lora
#   3 train, infer
#   4 app, serve        (the application layer: commands' code over the library)
#   5 cli
# Rules:
#   - a file may include a header of its own folder, of a lower layer, or of its own layer;
#     a header of a HIGHER layer is a violation;
#   - includes between folders of the same layer must not close a loop: the graph of
#     folder -> folder includes (all layers) has no cycle;
#   - the CLI (cli/) includes only the public headers "afinar.h" / "afinar_app.h", its own cli/*.h
#     and system headers, and not the library's dependencies (<cJSON.h>, <pcre2.h>);
#   - include/afinar.h includes only system headers; include/afinar_app.h only "afinar.h" and
#     system headers;
#   - "afinar_app.h" (the application layer's API) is included only by app, serve, cli and train
#     (the training run orchestration, until it moves to app);
#   - every folder of src/ is in the table above (a new folder must be placed in a layer);
#   - what the public headers pull in counts too: with the objects of a build at hand
#     ($AFINAR_BIN's folder, else build/), every call from one folder to a function DEFINED in
#     another (through afinar.h or not: nm) is an edge that must go down or sideways, and the
#     graph of include and call edges together has no cycle (model -> lora and lora -> model
#     through afinar.h was such a loop).
# "afinar.h" may be included from anywhere (declarations only). tests/, bench/ are not checked.
# Prints one line per violation and "RESULT check_layers passed=P failed=F skipped=0"
# (P: include lines and call edges checked and found fine, F: violations); exit status 1 when F > 0.
#   sh tests/check_layers.sh [REPO_ROOT]

root=${1:-.}
cd "$root" || { echo "RESULT check_layers passed=0 failed=1 skipped=0"; exit 1; }

layer_of() {
    case "$1" in
    core) echo 0 ;;
    kernels | formats | tokenizer) echo 1 ;;
    model | lora) echo 2 ;;
    train | infer) echo 3 ;;
    app | serve) echo 4 ;;
    cli) echo 5 ;;
    *) echo -1 ;;
    esac
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/afinar_layers_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
edges=$tmp/edges

# Every '#include' line of the checked files as "file<TAB>kind<TAB>name" (kind: q = "...", a = <...>).
{
    find src cli -name '*.c' -o -name '*.h' | LC_ALL=C sort | while read -r f; do
        sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/q	\1/p;
                s/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\([^>]*\)>.*/a	\1/p' "$f" |
            sed "s|^|$f	|"
    done
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/include\/afinar.h	q	\1/p' include/afinar.h
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/include\/afinar_app.h	q	\1/p' include/afinar_app.h
} > "$tmp/includes"

for d in $(find src -mindepth 1 -maxdepth 1 -type d | sed 's|^src/||' | LC_ALL=C sort); do
    if [ "$(layer_of "$d")" = -1 ]; then
        echo "FAIL src/$d: folder not in the layer table of tests/check_layers.sh (place it in a layer)"
        fail=$((fail + 1))
    fi
done

TAB=$(printf '\t')
while IFS="$TAB" read -r file kind name; do
    case "$file" in
    include/afinar_app.h)
        if [ "$name" = afinar.h ]; then pass=$((pass + 1)); continue; fi
        echo "FAIL $file: includes \"$name\": the application header includes only afinar.h and system headers"
        fail=$((fail + 1)); continue ;;
    include/*)
        echo "FAIL $file: includes \"$name\": the public header includes only system headers"
        fail=$((fail + 1)); continue ;;
    cli/*) from=cli ;;
    src/*) from=$(echo "$file" | cut -d/ -f2) ;;
    esac
    if [ "$kind" = a ]; then
        if [ "$from" = cli ]; then
            case "$name" in
            cJSON.h | cjson/* | pcre2.h)
                echo "FAIL $file: includes <$name>: the CLI uses only afinar.h (the library's dependencies stay behind it)"
                fail=$((fail + 1)); continue ;;
            esac
        fi
        pass=$((pass + 1)); continue
    fi
    if [ "$name" = afinar.h ]; then pass=$((pass + 1)); continue; fi
    if [ "$name" = afinar_app.h ]; then
        case "$from" in
        app | serve | cli | train) pass=$((pass + 1)) ;;
        *) echo "FAIL $file: includes \"afinar_app.h\": the application layer's header is for app, serve, cli (and train's run orchestration)"
           fail=$((fail + 1)) ;;
        esac
        continue
    fi
    case "$name" in
    */*) to=${name%%/*} ;;
    *) # a header next to the including file
        if [ -f "$(dirname "$file")/$name" ]; then pass=$((pass + 1)); continue; fi
        echo "FAIL $file: includes \"$name\": not found next to the file (name internal headers by folder/, e.g. \"core/core.h\")"
        fail=$((fail + 1)); continue ;;
    esac
    if [ "$from" = cli ]; then
        echo "FAIL $file: includes \"$name\": the CLI includes only \"afinar.h\" and its own cli/*.h"
        fail=$((fail + 1)); continue
    fi
    if [ ! -f "src/$name" ]; then
        echo "FAIL $file: includes \"$name\": no such header under src/"
        fail=$((fail + 1)); continue
    fi
    lf=$(layer_of "$from"); lt=$(layer_of "$to")
    if [ "$lt" -gt "$lf" ]; then
        echo "FAIL $file: includes \"$name\": $to (layer $lt) is above $from (layer $lf)"
        fail=$((fail + 1)); continue
    fi
    pass=$((pass + 1))
    [ "$to" != "$from" ] && printf '%s %s\n' "$from" "$to" >> "$edges"
done < "$tmp/includes"

# Call edges (what afinar.h pulls in): every object of the build whose source still exists; a
# global function defined in folder B and called from folder A is an edge A -> B.
bdir=$(dirname "${AFINAR_BIN:-build/afinar}")
if [ -d "$bdir/src" ] && command -v nm >/dev/null 2>&1; then
    find "$bdir/src" -name '*.o' | LC_ALL=C sort | while read -r o; do
        rel=${o#"$bdir"/}
        [ -f "${rel%.o}.c" ] || continue
        fo=$(echo "$rel" | cut -d/ -f2)
        nm "$o" 2>/dev/null | awk -v f="$fo" '$2 ~ /^[TDBR]$/ { print "D", f, $3 } $1 == "U" { print "U", f, $2 }'
    done > "$tmp/syms"
    awk '$1 == "D" { def[$3] = $2 } $1 == "U" { use[NR] = $2 " " $3 }
         END { for (k in use) { split(use[k], u, " "); if ((u[2] in def) && def[u[2]] != u[1]) print u[1], def[u[2]], u[2] } }' \
        "$tmp/syms" | LC_ALL=C sort -u -k1,2 > "$tmp/calls"
    while read -r a b fn; do
        la=$(layer_of "$a"); lb=$(layer_of "$b")
        if [ "$lb" -gt "$la" ]; then
            echo "FAIL src/$a calls $fn of src/$b: $b (layer $lb) is above $a (layer $la)"
            fail=$((fail + 1)); continue
        fi
        pass=$((pass + 1))
        printf '%s %s\n' "$a" "$b" >> "$edges"
    done < "$tmp/calls"
fi

# Folder loops: tsort reports a cycle of the folder graph on stderr.
if [ -s "$edges" ]; then
    LC_ALL=C sort -u "$edges" > "$edges.u"
    if tsort "$edges.u" > /dev/null 2> "$tmp/loop"; then
        pass=$((pass + 1))
    else
        nodes=$(grep -v 'input contains a loop' "$tmp/loop" | sed 's/^tsort: //' | tr '\n' ' ')
        echo "FAIL folder include loop through: $nodes"
        while read -r a b; do
            case " $nodes " in *" $a "*) ;; *) continue ;; esac
            case " $nodes " in *" $b "*) ;; *) continue ;; esac
            ex=$(awk -F"$TAB" -v a="$a" -v b="$b" \
                '$2 == "q" && index($3, b "/") == 1 && index($1, "src/" a "/") == 1 { print $1 " includes " $3; exit }' \
                "$tmp/includes")
            [ -n "$ex" ] || ex=$(awk -v a="$a" -v b="$b" '$1 == a && $2 == b { print "a call of " $3; exit }' "$tmp/calls" 2>/dev/null)
            echo "  $a -> $b (e.g. $ex)"
        done < "$edges.u"
        fail=$((fail + 1))
    fi
fi

echo "include layering: $pass include lines fine, $fail violations"
echo "RESULT check_layers passed=$pass failed=$fail skipped=0"
[ "$fail" = 0 ]
