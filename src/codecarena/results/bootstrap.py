"""The bootstrap behind every interval codecarena prints (`compare`'s paired differences, the means of
summary.json, the leaderboard and the report): the distribution of a mean, resampling single values or
whole groups (a speaker with all their utterances), and its percentile interval; and the one bound
below which an interval is not trusted (`MIN_UNITS`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

LEVEL = 0.95
# Below this many resampling units (utterances, or speakers) a percentile bootstrap interval is too
# narrow to trust (it undercovers: with 2 units it is the two values' range), so the tables, plots and
# reports give none, and `compare` flags the one it computes. One bound for every surface. (numpy is
# imported where it is used, so that the formatters and the console can read this without it.)
MIN_UNITS = 10
_CHUNK_DRAWS = 2_000_000  # resample indices drawn per chunk (bounds memory; fixed, so results stay deterministic)


def unit_count(n: int, unit: str) -> str:
    """`n` resampling units as words: "1 utterance", "3 speakers"."""
    return f"{n} {unit}" + ("" if n == 1 else "s")


def few_units_warning(n: int, unit: str) -> str:
    """The one warning for an interval on fewer than MIN_UNITS resampling units, wherever it is said."""
    return (f"only {unit_count(n, unit)}, fewer than {MIN_UNITS}: a percentile bootstrap interval on so few is "
            f"too narrow (it undercovers)")


class BootstrapError(ValueError):
    """Differences, groups or settings the bootstrap cannot work with; the message is one line."""


def bootstrap_means(diffs: Sequence[float] | np.ndarray, groups: Sequence[Any] | None = None,
                    resamples: int = 10000, seed: int = 0) -> np.ndarray:
    """Bootstrap distribution of the mean of `diffs`.

    Without `groups` every value is its own resampling unit. With `groups` (one label per value)
    the units are the groups: each resample draws as many groups as there are, with replacement,
    takes every value of each drawn group, and the statistic is the mean over all values taken
    (sum of the drawn groups' sums / sum of their sizes). Units are ordered by sorted label, the
    draws come from numpy.random.default_rng(seed) in fixed-size chunks: the same data and seed
    always give the same array.
    """
    import numpy as np

    values = np.asarray(diffs, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise BootstrapError("bootstrap needs a non-empty 1-D array of differences")
    if not np.all(np.isfinite(values)):
        raise BootstrapError("bootstrap differences must be finite")
    if resamples < 1:
        raise BootstrapError(f"resamples must be >= 1, got {resamples}")
    if groups is None:
        sums, counts = values, np.ones_like(values)
    else:
        labels = np.asarray([str(g) for g in groups])
        if labels.shape != values.shape:
            raise BootstrapError("bootstrap: one group label per difference is needed")
        _, inverse = np.unique(labels, return_inverse=True)
        sums = np.bincount(inverse, weights=values)
        counts = np.bincount(inverse).astype(np.float64)
    units = sums.size
    rng = np.random.default_rng(seed)
    out = np.empty(resamples, dtype=np.float64)
    chunk = max(1, min(resamples, _CHUNK_DRAWS // units))
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        idx = rng.integers(0, units, size=(k, units))
        out[start:start + k] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    return out


def percentile_interval(means: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The percentile-method interval: the (1-level)/2 and 1-(1-level)/2 quantiles (numpy's
    default linear interpolation) of the bootstrap distribution."""
    import numpy as np

    if not 0 < level < 1:
        raise BootstrapError(f"confidence level must be in (0, 1), got {level}")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def bootstrap_ci(diffs: Sequence[float] | np.ndarray, groups: Sequence[Any] | None = None,
                 resamples: int = 10000, seed: int = 0, level: float = LEVEL) -> tuple[float, float]:
    return percentile_interval(bootstrap_means(diffs, groups, resamples, seed), level)

