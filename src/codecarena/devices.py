"""Devices: which one a codec or metric runs on (`--device cpu|cuda[:N]|mps`) and what it was.

The harness never imports torch: what a device is, as a codec runtime's torch sees it, is asked of
that runtime (`probe`, which runs `python -m codecarena.device_probe DEVICE` in the runtime's
interpreter) and answered as a `DeviceInfo`, which rows and plans record (docs/results.md).
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

FORMS = "cpu, cuda, cuda:N (N = 0, 1, ...) or mps"
KINDS = ("cpu", "cuda", "mps")
PROBE_VERSION = 1
PROBE_TIMEOUT_S = 120.0
# The numerical settings in force on a torch device, with the type each must have: the switches that
# decide whether two runs of one model give the same numbers (docs/results.md, "Devices").
SETTINGS: dict[str, tuple[type, ...]] = {
    "matmul_allow_tf32": (bool,),  # torch.backends.cuda.matmul.allow_tf32
    "cudnn_allow_tf32": (bool,),  # torch.backends.cudnn.allow_tf32
    "cudnn_benchmark": (bool,),  # torch.backends.cudnn.benchmark
    "cudnn_deterministic": (bool,),  # torch.backends.cudnn.deterministic
    "deterministic_algorithms": (bool,),  # torch.are_deterministic_algorithms_enabled()
    "float32_matmul_precision": (str,),  # torch.get_float32_matmul_precision()
    "cublas_workspace_config": (str, type(None)),  # the CUBLAS_WORKSPACE_CONFIG environment variable
    "threads": (int,),  # torch.get_num_threads()
}


class DeviceError(ValueError):
    """A device that is not one of the accepted forms, or that a runtime cannot use."""


def parse_device(text: str, option: str = "--device") -> str:
    """The canonical spelling of a device (`cuda:0` stays `cuda:0`; `cuda` is the current CUDA device)."""
    value = str(text).strip().lower()
    if value in KINDS:
        return value
    match = re.fullmatch(r"cuda:(\d+)", value)
    if match:
        return f"cuda:{int(match.group(1))}"
    raise DeviceError(f"{option} {text!r}: not a device; accepted: {FORMS}")


def device_kind(device: str) -> str:
    return parse_device(device).split(":")[0]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@dataclass(frozen=True)
class DeviceInfo:
    device: str  # canonical, as parse_device spells it
    kind: str  # "cpu", "cuda" or "mps"
    name: str  # the CPU model, or the GPU's name as torch reports it ("NVIDIA H200")
    driver: str | None  # the NVIDIA kernel driver's version; None off CUDA or when unreadable
    torch: str
    cuda: str | None  # torch.version.cuda: the CUDA this torch was built with; None for a CPU build
    cudnn: str | None  # torch.backends.cudnn.version(); None when torch has no cuDNN
    settings: dict[str, Any]  # SETTINGS, as they were in force

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, what: str = "device") -> DeviceInfo:
        """Strict: exactly these keys, each of its type, the device canonical and of its kind."""
        if not isinstance(data, dict):
            raise DeviceError(f"{what}: not a JSON object")
        names = {f.name for f in fields(cls)}
        if set(data) != names:
            raise DeviceError(f"{what}: missing keys {sorted(names - set(data))}, unexpected keys "
                              f"{sorted(set(data) - names)}")
        for key in ("device", "kind", "name", "torch"):
            if not isinstance(data[key], str):
                raise DeviceError(f"{what}: {key} {data[key]!r} is not a string")
        for key in ("driver", "cuda", "cudnn"):
            if data[key] is not None and not isinstance(data[key], str):
                raise DeviceError(f"{what}: {key} {data[key]!r} is neither a string nor null")
        if parse_device(data["device"], f"{what}: device") != data["device"]:
            raise DeviceError(f"{what}: device {data['device']!r} is not spelled canonically")
        if data["kind"] != device_kind(data["device"]):
            raise DeviceError(f"{what}: kind {data['kind']!r} is not the kind of device {data['device']!r}")
        settings = data["settings"]
        if not isinstance(settings, dict) or set(settings) != set(SETTINGS):
            raise DeviceError(f"{what}: settings must hold exactly {sorted(SETTINGS)}, got "
                              f"{sorted(settings) if isinstance(settings, dict) else settings!r}")
        for key, types in SETTINGS.items():
            # bool is an int to Python: a flag's type is checked exactly.
            if type(settings[key]) not in types:
                raise DeviceError(f"{what}: setting {key} {settings[key]!r} is not of type "
                                  + " or ".join(t.__name__ for t in types))
        return cls(**{**data, "settings": dict(settings)})


def parse_probe_output(text: str, python: str, device: str) -> DeviceInfo:
    """What `python -m codecarena.device_probe` printed: {"version", "ok", "error", "info"}."""
    try:
        data = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or set(data) != {"version", "ok", "error", "info"} \
            or data["version"] != PROBE_VERSION:
        raise DeviceError(f"{python}: the device probe for {device} gave no answer of version {PROBE_VERSION} "
                          f"(is codecarena installed in this runtime?)")
    if not data["ok"]:
        raise DeviceError(f"{python}: {data['error']}")
    return DeviceInfo.from_dict(data["info"], f"{python}: device probe")


def probe(python: str, device: str, timeout_s: float = PROBE_TIMEOUT_S) -> DeviceInfo:
    """The device as the runtime of interpreter `python` sees it; a `DeviceError` naming that interpreter
    when it cannot use it (no such device, a CPU-only torch, no torch at all)."""
    device = parse_device(device)
    try:
        done = subprocess.run([python, "-m", "codecarena.device_probe", device], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise DeviceError(f"{python}: the device probe for {device} did not answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise DeviceError(f"{python}: cannot run the device probe ({exc.strerror or exc})") from None
    return parse_probe_output(done.stdout, python, device)
