#!/bin/sh
# gen_cli_doc.sh — docs/CLI.md, the command-line reference, generated from the help texts of the
# built binary: `afinar --help`, then `afinar help CMD` for every command that help lists. Run it
# (or `make cli-doc`) after changing a help text; tests/check_cli_doc.sh fails when docs/CLI.md is
# stale. Written atomically (a temporary file renamed over OUT).
#   sh scripts/gen_cli_doc.sh [BIN (build/afinar)] [OUT (docs/CLI.md)]
set -eu
bin=${1:-build/afinar}
out=${2:-docs/CLI.md}
[ -x "$bin" ] || { echo "gen_cli_doc.sh: $bin is not an executable (run make first)" >&2; exit 1; }
# the commands: the first word of each indented line of the "commands:" block of the general help
cmds=$("$bin" --help | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z-]*\).*/\1/p')
[ -n "$cmds" ] || { echo "gen_cli_doc.sh: no command list in '$bin --help'" >&2; exit 1; }
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
{
    echo "# afinar command-line reference"
    echo
    echo "Generated from the help texts of the commands by \`scripts/gen_cli_doc.sh\` (\`make cli-doc\`);"
    echo "\`make test\` fails when this file differs from what the binary prints. Do not edit by hand."
    echo
    echo "## afinar"
    echo
    echo '```text'
    "$bin" --help
    echo '```'
    for c in $cmds; do
        echo
        echo "## afinar $c"
        echo
        echo '```text'
        "$bin" help "$c"
        echo '```'
    done
} > "$tmp"
mv "$tmp" "$out"
trap - EXIT
