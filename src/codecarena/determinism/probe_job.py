"""A determinism probe's job (version `PROBE_VERSION`): what the doctor (determinism/doctor.py, in the
harness) asks of a probe (determinism/probe.py, in the codec's runtime), written as JSON and read back
strictly. It lives apart from the probe, so that the harness never imports the code that loads
adapters."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

PROBE_VERSION = 2
#: The cuBLAS workspace that makes cuBLAS reductions reproducible (CUDA's documentation).
CUBLAS_WORKSPACE = ":4096:8"


@dataclass(frozen=True)
class ProbeJob:
    version: int
    mode: str  # "load", "controls", "single" or "switch"
    codec: str  # canonical spec
    weights: str
    variant: str
    jit_fusion: str  # "on" or "off"
    input: str  # a wav at the arena rate
    start_s: float
    seconds: float
    output: str
    jit: str = "default"  # "disabled": PYTORCH_JIT=0, scripted functions run as plain Python (the reference)
    inject: str = ""  # detector self-check: perturb this module's output on the first encode only
    device: str = "cpu"  # where the model runs (devices.parse_device spelling)
    switches: tuple[str, ...] = ()  # determinism/switches.py names, applied (after seeding) before the model loads


def read_job(path: Path) -> ProbeJob:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    names = set(ProbeJob.__dataclass_fields__)
    if not isinstance(data, dict) or set(data) != names or data.get("version") != PROBE_VERSION:
        raise ValueError(f"{path}: not a version {PROBE_VERSION} probe job with keys {sorted(names)}")
    return ProbeJob(**{**data, "switches": tuple(data["switches"])})
