"""WARP-Q (Jassim, Skoglund, Chinen and Hines, ICASSP 2021; IET Signal Processing 2022): a full-reference
quality score for generative and low-rate speech codecs, without model weights, through the `warpq`
package (1.5.2, Apache-2.0) with its published defaults, unchanged.

What it computes: both signals at 16 kHz keep only what pyvad's WebRTC voice activity detector calls
speech (30 ms hops, mode 0); 13 MFCCs (fmax 5 kHz, 32 ms frames, 4 ms hop, lifter 3), normalised in
mean and variance over a 0.84 s sliding window; the decoded MFCCs cut into 0.4 s patches every 0.2 s;
each patch aligned against the whole reference by subsequence dynamic time warping (librosa, step
sizes (1,0), (0,3), (1,3)); the score is the median of the patches' accumulated costs, each over its
length, rounded to 3 decimals by the package. Lower is better: 0 would be a perfect match, and the
package maps 3.5 to its normalised 0 (`normalized` in the details, 1 - raw / 3.5 clamped to 0-1).

pyvad (0.1.3, the release pip resolves beside numpy 2: 0.2.0 requires numpy<2) and warpq's own
normalisation call `np.lib.pad`, which numpy 2 removed; `np.pad` is the same function, and while a
score is computed, and only then, it answers to that old name too.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from codecarena.arena import ARENA_RATE

OUTPUTS = ("warp_q",)


@contextlib.contextmanager
def _numpy_lib_pad() -> Iterator[None]:
    """numpy 1's `np.lib.pad` alias of `np.pad`, for the duration of a call into warpq and pyvad."""
    lib: Any = np.lib
    added = "pad" not in vars(lib)
    if added:
        lib.pad = np.pad
    try:
        yield
    finally:
        if added:
            del lib.pad


class WarpQ:
    def __init__(self) -> None:
        with _numpy_lib_pad():
            from warpq.core import warpqMetric

            # n_jobs only sizes warpq's batch mode (a CSV of files), which codecarena never calls.
            self._metric = warpqMetric(sr=ARENA_RATE, n_jobs=1)
        self.patch_s = float(self._metric.patch_size)

    def score(self, reference: np.ndarray, decoded: np.ndarray) -> tuple[float, float, int]:
        """(raw score, normalised score, number of patches) of two 16 kHz signals, samples within [-1, 1]
        (pyvad refuses others); ValueError when voice activity detection leaves less than one patch of
        either signal."""
        with _numpy_lib_pad(), warnings.catch_warnings():
            # The package warns, then returns NaN, for speech shorter than a patch: said below instead.
            warnings.simplefilter("ignore", UserWarning)
            found = self._metric.evaluate(np.asarray(reference, dtype=np.float64),
                                          np.asarray(decoded, dtype=np.float64), arr_sr=ARENA_RATE)
        raw = float(found["raw_warpq_score"])
        if np.isnan(raw):
            raise ValueError(f"WARP-Q's voice activity detector keeps less than its {self.patch_s:g} s patch of the "
                             "reference or the decoded audio: no patch to align")
        return raw, float(found["normalized_warpq_score"]), int(found["total_patch_count"])
