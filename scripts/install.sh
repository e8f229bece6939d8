#!/usr/bin/env bash
# Creates .venv beside this repository and installs codecarena with everything its tests need.
# Idempotent: a second call only checks that the pinned packages are present.
set -euo pipefail
cd "$(dirname "$0")/.."
# The telephony baselines (G.722, G.726, GSM, Speex, LC3) run Debian's own tools as command-line codecs;
# installed when missing (as root, like .ci/run's chromium). Their registry entries pin the versions, and
# `codecarena run` refuses, with one line, a tool whose installed version differs from its pin.
# libseccomp2 and util-linux (unshare) hold a user codec's sandbox (docs/security.md); Debian has both.
missing=$(for pkg in ffmpeg libgsm-tools speex liblc3-tools libseccomp2 util-linux; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" = installed ] || echo "$pkg"; done)
if [ -n "$missing" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# The pinned CPU torch first: left to resolve on its own, pip would pull several GB of CUDA wheels.
.venv/bin/python -m pip install --quiet torch==2.13.0
# webrtcvad (needed by resemblyzer) builds with pkg_resources, which setuptools 81 removed.
.venv/bin/python -m pip install --quiet "setuptools<81" wheel
.venv/bin/python -m pip install --quiet -e '.[dev,metrics,scale]'
# Distill-MOS: both packages declare torchaudio (and xls-r-sqa transformers) for code paths codecarena
# never runs (a file loader, the XLS-R feature extractor); torchaudio has no release for the pinned
# torch, so they come without their declared dependencies (codecarena/metrics/distill_mos.py).
.venv/bin/python -m pip install --quiet --no-deps distillmos==0.9.1 xls-r-sqa==0.1.0
# Every other unmet requirement still fails the install.
unmet=$(.venv/bin/python -m pip check | grep -v -x -E \
  -e "(distillmos 0\.9\.1|xls-r-sqa 0\.1\.0) requires (torchaudio|transformers), which is not installed\." \
  -e "No broken requirements found\." || true)
if [ -n "$unmet" ]; then echo "$unmet" >&2; exit 1; fi
