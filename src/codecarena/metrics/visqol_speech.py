"""ViSQOL v3 in speech mode: visqol-python 3.8.0, a pure-Python port of Google's ViSQOL, with the
deep-lattice mapper that the C++ ViSQOL uses by default (`--use_lattice_model=true`; its TFLite model
ships in the wheel and runs on ai-edge-litert). 16 kHz, reference against decoded, with ViSQOL's own
global alignment and patch realignment, so the unaligned pair is given. The output is MOS-LQO (1-5);
the details hold the mean NSIM (`vnsim`).

Measured here on the smoke set: identical signals (pcm:16) score 3.94-4.61, lower on the shortest
clips (1.5 s: 3.94 and 4.38), not 5: the lattice mapper is trained on real ratings, and never maps a
perfect copy to the top of the scale (the polynomial fallback would give 5.0).
"""

from __future__ import annotations

import numpy as np

OUTPUTS = ("visqol",)


class Visqol:
    def __init__(self) -> None:
        from visqol.api import VisqolApi

        self._api = VisqolApi()
        self._api.create(mode="speech", use_lattice_model=True)

    def score(self, reference: np.ndarray, decoded: np.ndarray, sample_rate: int) -> tuple[float, float]:
        """(MOS-LQO, mean NSIM) of the pair."""
        result = self._api.measure_from_arrays(np.ascontiguousarray(reference, dtype=np.float64),
                                               np.ascontiguousarray(decoded, dtype=np.float64), sample_rate)
        return float(result.moslqo), float(result.vnsim)
