"""DNSMOS P.835 (SIG, BAK, OVRL) and P.808, non-intrusive, from the ONNX models inside `speechmos`.

speechmos tiles clips shorter than its 9.01 s window by repeating them, and averages 1 s hops over
longer ones; that is the published DNSMOS protocol, recorded as such in the metric's declaration.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OUTPUTS = ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808")


def model_files() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("speechmos")
    if spec is None or spec.origin is None:
        return []
    folder = Path(spec.origin).parent / "dnsmos_models"
    return [folder / "sig_bak_ovr.onnx", folder / "model_v8.onnx"]


class Dnsmos:
    def __init__(self) -> None:
        from speechmos import dnsmos

        self._run = dnsmos.run

    def score(self, audio: np.ndarray, sample_rate: int) -> dict[str, float]:
        if sample_rate != 16000:
            raise ValueError(f"DNSMOS needs 16 kHz audio, got {sample_rate} Hz")
        if not np.any(audio):
            raise ValueError("DNSMOS of an all-zero signal is undefined")
        result = self._run(np.clip(audio, -1.0, 1.0), 16000)
        return {
            "dnsmos_sig": float(result["sig_mos"]),
            "dnsmos_bak": float(result["bak_mos"]),
            "dnsmos_ovrl": float(result["ovrl_mos"]),
            "dnsmos_p808": float(result["p808_mos"]),
        }
