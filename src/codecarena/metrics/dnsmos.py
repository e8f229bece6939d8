"""DNSMOS P.835 (SIG, BAK, OVRL) and P.808, non-intrusive, from the ONNX models inside `speechmos`.

speechmos tiles clips shorter than its 9.01 s window by repeating them, and averages 1 s hops over
longer ones; that is the published DNSMOS protocol, recorded as such in the metric's declaration.
"""

from __future__ import annotations

import numpy as np

from codecarena.arena import ARENA_RATE

OUTPUTS = ("dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl", "dnsmos_p808")


class Dnsmos:
    def __init__(self) -> None:
        from speechmos import dnsmos

        self._run = dnsmos.run

    def score(self, audio: np.ndarray) -> dict[str, float]:
        """The four scores of audio at the arena rate (the rate of the DNSMOS models)."""
        if not np.any(audio):
            raise ValueError("DNSMOS of an all-zero signal is undefined")
        result = self._run(np.clip(audio, -1.0, 1.0), ARENA_RATE)
        return {
            "dnsmos_sig": float(result["sig_mos"]),
            "dnsmos_bak": float(result["bak_mos"]),
            "dnsmos_ovrl": float(result["ovrl_mos"]),
            "dnsmos_p808": float(result["p808_mos"]),
        }
