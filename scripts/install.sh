#!/usr/bin/env bash
# Creates .venv beside this repository and installs codecarena with everything its tests need.
# Idempotent: a second call only checks that the pinned packages are present.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
.venv/bin/python -m pip check
