"""Pitch fidelity: does the decoded speech keep the reference's fundamental frequency and voicing?

F0 is tracked with SwiftF0 (swift-f0 0.3.0: an ONNX model in the wheel, 16 kHz, one value per
256-sample frame, a frame voiced when its confidence is at least 0.5; one ONNX thread, so the values
repeat bit for bit) on the delay-aligned overlap of reference and decoded (the same alignment as
STOI and SI-SDR). Outputs:

* ``gpe``: gross pitch error, the share of the frames voiced in both whose F0 differs by more than
  20 % (the usual threshold of pitch-tracking evaluations; an octave slip is one);
* ``f0_rmse_cents``: root mean square of 1200 * log2(f0_decoded / f0_reference) over the frames
  voiced in both without a gross error (the fine pitch error: a single octave slip would otherwise
  dominate it; 0 for a perfect copy, lower is better);
* ``f0_corr``: Pearson correlation of log F0 over the same frames (1 for a perfect copy);
* ``vde``: voicing decision error, the share of frames voiced in one signal and not the other
  (0 for a perfect copy, lower is better).

Fewer than ``MIN_VOICED_FRAMES`` frames voiced in both (or without a gross error) fail the F0
outputs with that reason (too little pitch to compare); ``vde`` needs only frames.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from codecarena.metrics.records import Records, result
from codecarena.plural import counted

OUTPUTS = ("f0_rmse_cents", "f0_corr", "gpe", "vde")
VOICED = 0.5  # SwiftF0's calibrated voicing threshold
MIN_VOICED_FRAMES = 10  # 160 ms of voiced speech in both signals
GROSS_CENTS = 1200 * float(np.log2(1.2))  # a 20 % F0 difference, about 316 cents


class PitchFidelity:
    def __init__(self) -> None:
        from swift_f0 import SwiftF0

        self._detector = SwiftF0(threads=1, spin=False)

    def scores(self, reference: np.ndarray, decoded: np.ndarray, sample_rate: int, **details: Any) -> Records:
        """The three outputs for an aligned pair; `details` (the alignment) goes into every record."""
        ref = self._detector.detect(reference, sample_rate)
        dec = self._detector.detect(decoded, sample_rate)
        n = min(len(ref.pitch_hz), len(dec.pitch_hz))
        ref_voiced, dec_voiced = ref.confidence[:n] >= VOICED, dec.confidence[:n] >= VOICED
        both = ref_voiced & dec_voiced
        counts = {"frames": int(n), "voiced_reference": int(ref_voiced.sum()), "voiced_decoded": int(dec_voiced.sum()),
                  "voiced_both": int(both.sum()), **details}
        vde = result(float(np.mean(ref_voiced != dec_voiced)), **counts)
        if both.sum() < MIN_VOICED_FRAMES:
            reason = (f"only {counted(int(both.sum()), 'frame')} voiced in both signals "
                      f"(at least {MIN_VOICED_FRAMES} are needed)")
            return {**{o: result(error=reason, **counts) for o in OUTPUTS[:3]}, "vde": vde}
        log_ref, log_dec = np.log2(ref.pitch_hz[:n][both]), np.log2(dec.pitch_hz[:n][both])
        cents = 1200 * (log_dec - log_ref)
        fine = np.abs(cents) <= GROSS_CENTS
        counts["gross_frames"] = int((~fine).sum())
        out: Records = {"gpe": result(float(np.mean(~fine)), **counts), "vde": vde}
        if fine.sum() < MIN_VOICED_FRAMES:
            reason = (f"only {counted(int(fine.sum()), 'frame')} voiced in both without a gross error "
                      f"(at least {MIN_VOICED_FRAMES} are needed)")
            return {"f0_rmse_cents": result(error=reason, **counts), "f0_corr": result(error=reason, **counts), **out}
        out["f0_rmse_cents"] = result(float(np.sqrt(np.mean(cents[fine] ** 2))), **counts)
        if np.std(log_ref[fine]) == 0 or np.std(log_dec[fine]) == 0:
            out["f0_corr"] = result(error="F0 is constant in one signal: no correlation is defined", **counts)
        else:
            out["f0_corr"] = result(float(np.corrcoef(log_ref[fine], log_dec[fine])[0, 1]), **counts)
        return {o: out[o] for o in OUTPUTS}
