"""The runtime side of devices: what a device is as this interpreter's torch sees it.

Run as `python -m codecarena.device_probe DEVICE` inside a codec runtime: prints one JSON line
{"version", "ok", "error", "info"}, `info` a `DeviceInfo` when the device is usable. The worker uses
`device_info` and `torch_device_settings` for the device facts of every torch stage it runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from codecarena.devices import PROBE_VERSION, DeviceError, DeviceInfo, cpu_model, device_kind, parse_device
from codecarena.plural import counted


def torch_device_settings() -> dict[str, Any]:
    """The numerical settings in force now (devices.SETTINGS)."""
    import torch

    return {
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "float32_matmul_precision": str(torch.get_float32_matmul_precision()),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "threads": int(torch.get_num_threads()),
    }


def nvidia_driver() -> str | None:
    """The kernel driver's version (Linux), which torch does not report."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    words = text.split()
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


def check_usable(device: str) -> None:
    """A `DeviceError` saying why this runtime's torch cannot run on `device`."""
    import torch

    kind = device_kind(device)
    build = f"this runtime's torch {torch.__version__}"
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = " (a build without CUDA)" if torch.version.cuda is None else ""
            raise DeviceError(f"{device} requested but {build}{why} sees no CUDA device")
        index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise DeviceError(f"{device} requested but {build} sees "
                              f"{counted(torch.cuda.device_count(), 'CUDA device')}")
    elif kind == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(f"mps requested but {build} sees no MPS device")
    # A device that is listed may still refuse work (a GPU too new for this build's kernels).
    try:
        torch.ones(1, device=device).add_(1).cpu()
    except RuntimeError as exc:
        raise DeviceError(f"{device} requested but {build} cannot use it: {str(exc).splitlines()[0]}") from None


def device_info(device: str) -> DeviceInfo:
    """The device (which must be usable) and the settings in force now."""
    import torch

    device = parse_device(device)
    check_usable(device)
    kind = device_kind(device)
    if kind == "cuda":
        index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
        name, driver = torch.cuda.get_device_name(index), nvidia_driver()
    elif kind == "mps":
        name, driver = "Apple MPS", None
    else:
        name, driver = cpu_model(), None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return DeviceInfo(device=device, kind=kind, name=name, driver=driver, torch=str(torch.__version__),
                      cuda=torch.version.cuda, cudnn=None if cudnn is None else str(cudnn),
                      settings=torch_device_settings())


def answer(device: str) -> dict[str, Any]:
    try:
        info = device_info(device)
    except ImportError as exc:
        return {"version": PROBE_VERSION, "ok": False, "info": None,
                "error": f"{device} requested but this runtime has no torch ({exc})"}
    except DeviceError as exc:
        return {"version": PROBE_VERSION, "ok": False, "info": None, "error": str(exc)}
    return {"version": PROBE_VERSION, "ok": True, "error": "", "info": info.to_dict()}


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: python -m codecarena.device_probe DEVICE", file=sys.stderr)
        sys.exit(64)
    # Libraries that print would corrupt the answer: everything else goes to stderr.
    out, sys.stdout = sys.stdout, sys.stderr
    reply = answer(sys.argv[1])
    out.write(json.dumps(reply) + "\n")
    out.flush()
    sys.exit(0 if reply["ok"] else 2)


if __name__ == "__main__":
    main()
