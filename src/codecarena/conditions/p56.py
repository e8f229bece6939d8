"""The active speech level of ITU-T P.56 (method B), as ITU-T G.191's speech voltmeter (sv56) measures it.

The signal (float64, full scale 1.0) is rectified and smoothed twice by a first-order filter with a 30 ms
time constant (the envelope q); for each of 15 thresholds c_j = 2^(j-15), j = 0..14, a sample counts as
active while q reached c_j within the last 0.2 s (the hangover). With A_j the mean square over the
samples active at c_j, in dB, and C_j = 20 log10 c_j, the active level is where A_j - C_j falls to the
15.9 dB margin, between the first threshold below the margin and the one before it. G.191 finds that
point by bisection to a tolerance of 0.5 dB; here it is the exact crossing of the straight line between
the two thresholds' (C, A), which is the value that bisection approximates (docs/conditions.md).
The activity factor is the long-term mean square over the active one.

Levels are in dB relative to full scale (dBov: a full-scale square wave is 0 dBov, a full-scale sine
-3.01 dBov). Every step is float64 in a fixed order (scipy's lfilter runs sample by sample), so a level
re-derives exactly on one machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

TIME_CONSTANT_S = 0.03
HANGOVER_S = 0.2
MARGIN_DB = 15.9
THRESHOLDS = 15


class LevelError(ValueError):
    """A signal without active speech to measure (silence, or quieter than the lowest threshold)."""


@dataclass(frozen=True)
class ActiveLevel:
    level_db: float  # the active speech level, dBov
    activity: float  # the share of the signal that is active speech, 0..1
    long_term_db: float  # the mean square over the whole signal, dBov


def _active_counts(envelope: np.ndarray, hangover: int) -> np.ndarray:
    """Per threshold, the samples within `hangover` samples after (or at) one whose envelope reached it."""
    counts = np.zeros(THRESHOLDS, dtype=np.int64)
    for j in range(THRESHOLDS):
        above = np.concatenate([[0], np.cumsum(envelope >= 2.0 ** (j - THRESHOLDS), dtype=np.int64)])
        start = np.maximum(np.arange(envelope.size) - hangover, 0)
        counts[j] = int(np.count_nonzero(above[1:] - above[start] > 0))
    return counts


def active_level(signal: np.ndarray, sample_rate: int) -> ActiveLevel:
    """The P.56 active level of `signal` (module docstring); LevelError when it has none."""
    x = np.asarray(signal, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise LevelError("the signal is empty or not mono")
    g = math.exp(-1.0 / (sample_rate * TIME_CONSTANT_S))
    envelope = lfilter([1.0 - g], [1.0, -g], lfilter([1.0 - g], [1.0, -g], np.abs(x)))
    hangover = -(-sample_rate * 2 // 10)  # ceil(0.2 s * rate) in integers
    counts = _active_counts(envelope, hangover)
    energy = float(np.dot(x, x))
    if energy == 0.0 or counts[0] == 0:
        raise LevelError("the signal is silent")
    long_term = 10 * math.log10(energy / x.size)
    active_db = [10 * math.log10(energy / c) if c else math.inf for c in counts]
    threshold_db = [20 * math.log10(2.0 ** (j - THRESHOLDS)) for j in range(THRESHOLDS)]
    delta = [a - c for a, c in zip(active_db, threshold_db)]
    if delta[0] < MARGIN_DB:
        raise LevelError(f"the signal is too quiet to measure (long-term level {long_term:.1f} dBov)")
    for j in range(1, THRESHOLDS):
        if counts[j] and delta[j] <= MARGIN_DB:
            share = (delta[j - 1] - MARGIN_DB) / (delta[j - 1] - delta[j])
            level = active_db[j - 1] + share * (active_db[j] - active_db[j - 1])
            return ActiveLevel(level, min(1.0, 10 ** ((long_term - level) / 10)), long_term)
    # Every threshold keeps the margin: the envelope stays above the highest one (a loud steady signal),
    # so every sample is active.
    return ActiveLevel(active_db[-1], 1.0, long_term)
