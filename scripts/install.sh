#!/usr/bin/env bash
# Creates .venv beside this repository and installs codecarena with everything its tests need.
# Idempotent: a second call only checks that the pinned packages are present.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# The pinned CPU torch first: left to resolve on its own, pip would pull several GB of CUDA wheels.
.venv/bin/python -m pip install --quiet torch==2.13.0
# webrtcvad (needed by resemblyzer) builds with pkg_resources, which setuptools 81 removed.
.venv/bin/python -m pip install --quiet "setuptools<81" wheel
.venv/bin/python -m pip install --quiet -e '.[dev,metrics,scale]'
.venv/bin/python -m pip check
