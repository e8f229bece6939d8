#!/usr/bin/env bash
# The device check (docs/devices.md): on a machine with one NVIDIA GPU, no network and its own torch,
# run the smoke clips through two torch families with synthetic weights on CUDA and on the CPU, the
# determinism doctor on DAC 16 kHz on CUDA with every switch, and print one table: RTF per device,
# identical payload files CPU vs CUDA, which switches agree. At most about 8 minutes.
#
#   scripts/device_check.sh [DATA_DIR]        DATA_DIR: the smoke-set folder (else $CODECARENA_DATA)
#   scripts/device_check.sh --download DIR    where there IS network, with the GPU machine's Python
#                                             version: fetch the wheels the check installs into DIR
#
# The machine's own `python3` and torch are used (a venv made with --system-site-packages, so torch
# comes from the system); the harness's few pure-Python and small compiled wheels and the two families'
# packages (their lock files without torch, torchaudio and CUDA libraries) are installed from the wheel
# folder ($DEVICE_CHECK_WHEELS, default ./wheels) with `pip install --no-index --no-deps`. codecarena
# itself runs from this checkout (PYTHONPATH), and both families run in that venv's interpreter
# through --runtime-python, so every row says `runtime: external`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fail() { echo "device_check: $*" >&2; exit 3; }
# The harness's imports for `run --metrics none` and `determinism`, beside numpy (the system's).
HARNESS="soundfile==0.14.0 soxr==1.1.0 cffi pycparser psutil rich markdown-it-py mdurl pygments scipy typing_extensions"
FAMILIES="encodec dac"
# What the system's CUDA torch provides: never replaced by the CPU pins of the locks.
SYSTEM='^(torch|torchaudio|triton|nvidia-[a-z0-9-]+|numpy|sympy|mpmath|networkx|filelock|fsspec|jinja2|markupsafe|typing.extensions)=='

if [[ "${1:-}" == "--download" ]]; then
    dest="${2:?usage: scripts/device_check.sh --download DIR}"
    mkdir -p "$dest"
    python3 -m pip download --quiet --dest "$dest" $HARNESS
    for family in $FAMILIES; do
        grep -v '^#' "$here/src/codecarena/codecs/$family/lock.txt" | grep -viE "$SYSTEM" | grep . \
            > "$dest/$family.requirements.txt"
        python3 -m pip download --quiet --no-deps --dest "$dest" -r "$dest/$family.requirements.txt"
    done
    echo "device_check: wheels in $dest; carry it to the GPU machine as ./wheels (or set DEVICE_CHECK_WHEELS)"
    exit 0
fi

# Refuse first, before anything is made: no GPU is one line.
command -v nvidia-smi >/dev/null 2>&1 || fail "no GPU: nvidia-smi not found"
nvidia-smi -L >/dev/null 2>&1 || fail "no GPU: nvidia-smi lists none"
python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 \
    || fail "no GPU for python3's torch (no torch, a CPU build, or torch.cuda.is_available() is false)"
data="${1:-${CODECARENA_DATA:-}}"
[[ -n "$data" && -d "$data" ]] || fail "no data folder: give the smoke-set folder as the argument or set CODECARENA_DATA"
wheels="${DEVICE_CHECK_WHEELS:-$here/wheels}"
[[ -d "$wheels" ]] || fail "no wheel folder $wheels (make it where there is network: scripts/device_check.sh --download DIR)"

work="${DEVICE_CHECK_WORK:-$(mktemp -d -t device_check.XXXXXX)}"
mkdir -p "$work/clips"
started=$SECONDS
python3 -m venv --system-site-packages "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install --quiet --no-index --no-deps --find-links "$wheels" "$wheels"/*.whl
export PYTHONPATH="$here/src" CODECARENA_DATA="$data" XDG_DATA_HOME="$work/data" XDG_CACHE_HOME="$work/cache"
for clip in en_ljspeech_LJ002-0020 en_ljspeech_LJ002-0035 en_librispeech_1089-134686-0001; do
    cp "$data/$clip.wav" "$work/clips/" || fail "$data/$clip.wav: missing (is $data the smoke set?)"
done
codecs=(--codec encodec:6k --codec dac:16khz)
common=(--input "$work/clips" "${codecs[@]}" --weights synthetic --metrics none --no-download --runtime-python "$py")
timeout 200 "$py" -m codecarena run "${common[@]}" --device cpu --out "$work/cpu" > "$work/cpu.log" 2>&1 \
    || fail "the CPU run failed (log: $work/cpu.log)"
timeout 120 "$py" -m codecarena run "${common[@]}" --device cuda --out "$work/cuda" > "$work/cuda.log" 2>&1 \
    || fail "the CUDA run failed (log: $work/cuda.log)"
timeout 150 "$py" -m codecarena determinism dac:16khz --weights synthetic --device cuda --switches all \
    --runtime-python "$py" --data-dir "$data" --out "$work/doctor" > "$work/doctor.log" 2>&1 \
    || [[ -f "$work/doctor/evidence.json" ]] || fail "the doctor failed (log: $work/doctor.log)"
echo "device check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); python3 $(python3 -c 'import platform, torch; print(platform.python_version(), "torch", torch.__version__, "CUDA", torch.version.cuda)'); $((SECONDS - started)) s; files in $work"
"$py" -m codecarena.results.devices_table "$work/cpu" "$work/cuda" "$work/doctor"
