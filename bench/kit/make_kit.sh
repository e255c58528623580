#!/usr/bin/env bash
# `make device-kit`: build build/device-kit/, a folder that runs the Vulkan tests and the GPU
# benchmarks on a bare x86-64 Linux machine in one command (run.sh; docs/VULKAN.md "Device kit").
#
#   build/device-kit/
#     run.sh                      the one command (bench/kit/run.sh)
#     afinar, test_backend_ops, test_vulkan_model, test_vulkan_cli
#                                 built without MPI and without `afinar serve` (BUILD=build/kit-obj
#                                 MPI=0 SERVE=0: Open MPI and libmicrohttpd's GnuTLS chain would
#                                 not fit; the kit does not serve), stripped, with
#                                 DT_RPATH $ORIGIN/lib (--disable-new-dtags: the libraries' own
#                                 dependencies are looked up there too)
#     lib/                        every shared library they need except glibc's (ldd)
#     debs/                       the Vulkan loader and GL dispatch packages (.deb, amd64) that the
#                                 device README unpacks when the machine has no libvulkan.so.1
#     models/smollm2-135m-11l.gguf  SmolLM2-135M-Instruct cut to its first 11 blocks, ffn_down in
#                                 Q3_K, the other projections and the embeddings in Q4_0 (gguf_shrink;
#                                 35 MiB: the whole model is 94 MiB, and SmolLM2's 576-wide rows
#                                 cannot take a K-quant's 256-value blocks)
#     tests/fixtures/tiny_gemma4.gguf, data/bbc/ (a slice), data/lm.jsonl, prompt.txt, py/
#
# Needs: the normal build's tools, models/SmolLM2-135M-Instruct.Q4_1.gguf and data/bbc
# (scripts/setup.sh), network for `apt-get download` on the first build (the .debs are kept in
# build/kit-debs). KIT_MAX_MIB (default 52) bounds the kit's size: the device tool carries at most
# 64 MiB with the repository's tracked files (about 9 MiB). Exit 1 with a message on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=build/device-kit
OBJ=build/kit-obj
SRC_MODEL=${SRC_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
KIT_LAYERS=${KIT_LAYERS:-11}
KIT_MODEL=smollm2-135m-${KIT_LAYERS}l.gguf
MAX_MIB=${KIT_MAX_MIB:-52}
JOBS=${JOBS:-2}
die() { echo "make_kit: $*" >&2; exit 1; }
[ -f "$SRC_MODEL" ] || die "$SRC_MODEL missing (scripts/setup.sh fetches it)"
for f in train val test; do [ -f "data/bbc/$f.jsonl" ] || die "data/bbc/$f.jsonl missing (scripts/setup.sh)"; done
pkg-config --exists vulkan && command -v "${GLSLC:-glslc}" >/dev/null || die "Vulkan headers or glslc missing (scripts/setup.sh)"

# 1. the programs, without MPI, with $ORIGIN/lib as their search path
TESTS="test_backend_ops test_vulkan_model test_vulkan_cli"
make -s -j"$JOBS" BUILD=$OBJ MPI=0 SERVE=0 VULKAN=1 'EXTRA_LDFLAGS=-Wl,-rpath,\$$ORIGIN/lib -Wl,--disable-new-dtags' \
  $OBJ/afinar $(for t in $TESTS; do echo $OBJ/tests/$t; done) >/dev/null
rm -rf "$KIT.tmp"
mkdir -p "$KIT.tmp/lib" "$KIT.tmp/debs" "$KIT.tmp/models" "$KIT.tmp/tests/fixtures" "$KIT.tmp/data/bbc" "$KIT.tmp/py"
for b in afinar $(for t in $TESTS; do echo tests/$t; done); do strip -o "$KIT.tmp/$(basename $b)" "$OBJ/$b"; done

# 2. their shared libraries, except the C library's own (present on every glibc system)
for b in afinar $TESTS; do ldd "$KIT.tmp/$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case $name in libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|ld-linux*) continue ;; esac
    cp -L "$path" "$KIT.tmp/lib/$name"
  done
for b in afinar $TESTS; do
  readelf -d "$KIT.tmp/$b" | grep -q 'RPATH.*\$ORIGIN/lib' || die "$b: no RPATH \$ORIGIN/lib"
done

# 3. the Vulkan loader packages (device README): kept in build/kit-debs between builds
DEBS="libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2"
mkdir -p build/kit-debs
for p in $DEBS; do
  ls build/kit-debs/${p}_*.deb >/dev/null 2>&1 && continue
  if [ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ]; then
    (cd build/kit-debs && apt-get download "$p" >/dev/null 2>&1) || die "apt-get download $p failed (network?)"
  else
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    mkdir -p /tmp/amd64/partial
    [ -f /tmp/amd64/.updated ] || { apt-get $o update >/dev/null && touch /tmp/amd64/.updated; } || die "apt-get update (amd64) failed"
    (cd build/kit-debs && apt-get $o download "$p" >/dev/null 2>&1) || die "apt-get download $p (amd64) failed"
  fi
done
cp build/kit-debs/*.deb "$KIT.tmp/debs/"

# 4. the model: made once, again when the source model or the tool changes
cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Iinclude -Isrc $(pkg-config --cflags libcjson) \
  -o $OBJ/gguf_shrink bench/kit/gguf_shrink.c $OBJ/libafinar.a $(make -s MPI=0 SERVE=0 print-ldlibs)
if [ ! -f build/kit-model/$KIT_MODEL ] || [ "$SRC_MODEL" -nt build/kit-model/$KIT_MODEL ] ||
   [ bench/kit/gguf_shrink.c -nt build/kit-model/$KIT_MODEL ]; then
  mkdir -p build/kit-model
  $OBJ/gguf_shrink "$SRC_MODEL" build/kit-model/$KIT_MODEL --layers "$KIT_LAYERS" --type q3_k --small-type q4_0
fi
cp build/kit-model/$KIT_MODEL "$KIT.tmp/models/"

# 5. fixtures, data, prompt, scripts
cp tests/fixtures/tiny_gemma4.gguf "$KIT.tmp/tests/fixtures/"
cp data/bbc/labels.txt "$KIT.tmp/data/bbc/"
head -n 192 data/bbc/train.jsonl > "$KIT.tmp/data/bbc/train.jsonl"
head -n 48 data/bbc/val.jsonl > "$KIT.tmp/data/bbc/val.jsonl"
head -n 96 data/bbc/test.jsonl > "$KIT.tmp/data/bbc/test.jsonl"
# causal-LM text: the same articles as {"text": ...} (the "input" field renamed, the label dropped)
head -n 128 "$KIT.tmp/data/bbc/train.jsonl" | sed -e 's/^{"input": /{"text": /' -e 's/, "label": [0-9]*}$/}/' \
  > "$KIT.tmp/data/lm.jsonl"
[ "$(grep -c '^{"text": .*"}$' "$KIT.tmp/data/lm.jsonl")" = 128 ] || die "data/bbc/train.jsonl: not {\"input\": ..., \"label\": N} lines"
cp bench/prompt_128.txt "$KIT.tmp/prompt.txt"
cp bench/kit/run.sh "$KIT.tmp/run.sh"
cp bench/kit/peft_gpu.py bench/train_peft.py bench/bench_common.py "$KIT.tmp/py/"
chmod +x "$KIT.tmp/run.sh"
git rev-parse --short HEAD > "$KIT.tmp/COMMIT" 2>/dev/null || echo unknown > "$KIT.tmp/COMMIT"
# the programs, libraries, model and data travel gzip-compressed (51 MiB -> 40): the device tool
# carries 64 MiB in all, the project's tracked files (18 MiB) included; run.sh unpacks every *.gz
# in place before anything else
for b in afinar $TESTS; do gzip -9 "$KIT.tmp/$b"; done
gzip -9 "$KIT.tmp"/lib/* "$KIT.tmp"/data/*.jsonl "$KIT.tmp"/data/bbc/*.jsonl
gzip -1 "$KIT.tmp"/models/*.gguf

# 6. size check, then the kit replaces the old one
mib=$(du -sm "$KIT.tmp" | cut -f1)
[ "$mib" -le "$MAX_MIB" ] || die "the kit is $mib MiB, over KIT_MAX_MIB=$MAX_MIB"
rm -rf "$KIT"
mv "$KIT.tmp" "$KIT"
echo "make_kit: $KIT: $mib MiB ($(ls $KIT/lib | wc -l) libraries, $(ls $KIT/debs | wc -l) packages, model $(du -m $KIT/models/$KIT_MODEL.gz | cut -f1) MiB compressed)"
