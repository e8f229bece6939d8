"""What the screened listeners' answers say: MUSHRA means with their intervals, and A/B preferences.

A MUSHRA condition's ratings form a full listeners x utterances table (every included listener
answered every trial). Its mean is the mean of the table. Its 95% interval resamples both random
factors at once, listeners and utterances, each with replacement and independently (the pigeonhole
bootstrap: A. B. Owen, "The pigeonhole bootstrap", Annals of Applied Statistics 1(2), 2007): a
bootstrap over ratings alone would treat 10 ratings of one listener as 10 listeners. The percentile
interval (results/bootstrap.py) is given only with at least MIN_UNITS listeners and MIN_UNITS
utterances; below, the mean stands alone and says which is short. Beside it, for comparison with
papers, the interval BS.1534-3 itself describes: the mean +- t(0.975, N-1) s / sqrt(N) over the N
ratings taken as independent (also withheld below MIN_UNITS ratings).

An A/B pair's preference: how often each side was chosen; the share of A among the decided answers
with its exact (Clopper-Pearson) 95% interval and the two-sided exact binomial test of 50%, both
treating answers as independent (they are not, across one listener's trials: docs/listening.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from codecarena.results.bootstrap import LEVEL, MIN_UNITS, percentile_interval
from codecarena.results.summary import CI_RESAMPLES, CI_SEED

_CHUNK = 500  # resamples drawn at once (bounds memory; fixed, so results stay deterministic)


def _counts(index: np.ndarray, n: int) -> np.ndarray:
    """How often each of n units was drawn, per resample (one row of `index` per resample)."""
    out = np.zeros((index.shape[0], n))
    np.add.at(out, (np.repeat(np.arange(index.shape[0]), index.shape[1]), index.ravel()), 1.0)
    return out


def crossed_bootstrap_means(table: np.ndarray, resamples: int = CI_RESAMPLES, seed: int = CI_SEED) -> np.ndarray:
    """Means of `table` (listeners x utterances) with its rows and its columns resampled independently."""
    listeners, utterances = table.shape
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    for start in range(0, resamples, _CHUNK):
        k = min(_CHUNK, resamples - start)
        rows = _counts(rng.integers(0, listeners, (k, listeners)), listeners)
        cols = _counts(rng.integers(0, utterances, (k, utterances)), utterances)
        out[start:start + k] = np.einsum("rl,lu,ru->r", rows, table, cols) / (listeners * utterances)
    return out


def t_interval(values: np.ndarray, level: float = LEVEL) -> list[float]:
    from scipy import stats

    n = values.size
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * float(np.std(values, ddof=1)) / float(np.sqrt(n))
    mean = float(np.mean(values))
    return [mean - half, mean + half]


def mushra_stats(table: np.ndarray) -> dict[str, Any]:
    """Mean, intervals and counts of one condition's listeners x utterances table of ratings."""
    listeners, utterances = table.shape
    short = [f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in ((listeners, "listener"), (utterances, "utterance"))
             if n < MIN_UNITS]
    ci = None if short else percentile_interval(crossed_bootstrap_means(table))
    ratings = table.ravel()
    return {"mean": float(np.mean(ratings)), "n_listeners": listeners, "n_utterances": utterances,
            "n_ratings": int(ratings.size),
            "ci95": list(ci) if ci is not None else None,
            "ci_note": f"no interval: only {' and '.join(short)}, fewer than {MIN_UNITS}" if short else "",
            "ci95_t": t_interval(ratings) if ratings.size >= MIN_UNITS else None}


def ab_stats(choices: list[str], a: str, b: str, no_preference: str) -> dict[str, Any]:
    """Counts of a pair's answers, the share of A among the decided ones and its exact interval and test."""
    from scipy import stats

    n_a, n_b, n_none = choices.count(a), choices.count(b), choices.count(no_preference)
    decided = n_a + n_b
    result = stats.binomtest(n_a, decided) if decided else None
    ci = result.proportion_ci(LEVEL, method="exact") if result is not None and decided >= MIN_UNITS else None
    return {"n": len(choices), "a": n_a, "b": n_b, "no_preference": n_none, "decided": decided,
            "share_a": n_a / decided if decided else None,
            "ci95": [float(ci.low), float(ci.high)] if ci is not None else None,
            "ci_note": "" if ci is not None else f"no interval: {decided} decided answers, fewer than {MIN_UNITS}",
            "p_value": float(result.pvalue) if result is not None else None}
