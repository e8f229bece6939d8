"""Inputs no metric may score: too short for the metric, silent, or clipped.

Every metric declares the shortest audio it accepts (`min_audio_s` in its declaration); silence and
clipping are judged the same way for every metric, on each signal it reads (the decoded audio, and
the reference unless the metric is no-reference). A metric given such an input fails with the reason
below and is never computed: a number from one (DNSMOS of a 1-sample clip, PESQ of near-silence)
would be averaged in as if it measured the codec.

- silent: the peak is below SILENT_PEAK_DBFS (-60 dBFS, a thousandth of full scale; digital silence
  and dither-level noise alike);
- clipped: more than CLIPPED_SHARE (1 %) of the samples sit at full scale (|x| >= 32767/32768, the
  16-bit maximum), which a decoder produces only when its output saturated (the row's own
  `clipped_samples` counts them for every row);
- too short: fewer than the metric's `min_audio_s` seconds.
"""

from __future__ import annotations

import math

import numpy as np

SILENT_PEAK_DBFS = -60.0
CLIPPED_SHARE = 0.01
FULL_SCALE = 32767 / 32768


def input_problem(metric: str, signals: dict[str, np.ndarray], sample_rate: int, min_audio_s: float) -> str | None:
    """Why `metric` must not score these signals (name -> samples), or None."""
    for label, samples in signals.items():
        x = np.asarray(samples, dtype=np.float64)
        seconds = x.size / sample_rate
        if seconds < min_audio_s:
            return f"{label} audio is {seconds:.4g} s long; {metric} needs at least {min_audio_s:g} s"
        peak = float(np.max(np.abs(x))) if x.size else 0.0
        if not peak or 20 * math.log10(peak) < SILENT_PEAK_DBFS:
            level = f"{20 * math.log10(peak):.1f} dBFS" if peak else "digital silence"
            return (f"{label} audio is silent (peak {level}, below {SILENT_PEAK_DBFS:g} dBFS); {metric} is undefined "
                    "on silence")
        share = float(np.mean(np.abs(x) >= FULL_SCALE))
        if share > CLIPPED_SHARE:
            return (f"{label} audio is clipped ({share:.1%} of its samples at full scale, more than "
                    f"{CLIPPED_SHARE:.0%}); {metric} is not scored on saturated audio")
    return None
