#!/usr/bin/env bash
# Install crossalign into ./.venv. One script for the README, CI and the Docker image.
#
#   ./install.sh            everything: training (torch), serving, the cluster mode (Ray Data),
#                           tests, the docs site (mkdocs)
#   ./install.sh --serve    serving only: onnxruntime, no torch
#
# torch is pinned to exactly 2.13.0: on this project's machines that is a local CPU
# wheel; any other spec can pull gigabytes of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")"
mode="${1:-all}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else echo "need root for: $*" >&2; return 1; fi; }

if [ "$mode" != "--serve" ] && command -v apt-get >/dev/null; then
    # trans-de-en: the Ding dictionary, our training corpus (GPL-2+).
    # chromium: the browser the explorer page's tests drive through playwright.
    # curl: the docs' examples, which tests/test_doc_examples.py runs as written.
    if ! dpkg -s trans-de-en chromium curl >/dev/null 2>&1; then
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq trans-de-en chromium curl >/dev/null
    fi
fi

PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if [ "$mode" = "--serve" ]; then
    .venv/bin/python -m pip install -q -e ".[serve]"
else
    # /opt/wheels holds the local CPU wheel on this project's machines.
    find_links=(); [ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)
    .venv/bin/python -m pip install -q "${find_links[@]}" "torch==2.13.0"
    .venv/bin/python -m pip install -q -e ".[train,serve,cluster,dev,docs]"
fi
echo "crossalign installed in $(pwd)/.venv ($mode)"
