"""Which metric predicts your listeners: every objective metric of the run against MUSHRA.

Two levels. Stimulus level: one point per codec condition x trial, the row's metric value against the
mean rating of the included listeners. System level: one point per codec condition, the metric's mean
over the test's utterances against the condition's MUSHRA mean (a condition with a value that is not
ok on any of those utterances is left out of that metric's points, and an error rate is not averaged
over several languages: metrics/outputs.py). Only codec conditions have rows; the hidden reference and
the anchors have no metric values and take no part.

For each level: Pearson's r, Spearman's rho and Kendall's tau-b (scipy.stats), each with a 95%
interval from Fisher's z transform, se 1/sqrt(n-3) for r, sqrt(1.06/(n-3)) for rho and sqrt(0.437/(n-4))
for tau (E. C. Fieller, H. O. Hartley, E. S. Pearson, Biometrika 44, 1957), given only with at least
MIN_UNITS points. Every coefficient is also shown as agreement: its sign turned for a metric where
lower is better, so that agreement with the listeners is positive for every metric. The ranking orders
the metrics by stimulus-level Kendall agreement (rank-based and robust to a metric's scale), best
first; a metric whose coefficient is undefined (too few points, or constant values) ranks last.
"""

from __future__ import annotations

import math
from typing import Any

from codecarena.results.listening.definition import ListeningTest
from codecarena.metrics import outputs
from codecarena.results.bootstrap import LEVEL, MIN_UNITS
from codecarena.results.run import Run

COEFFICIENTS = ("pearson", "spearman", "kendall")
RANKED_BY = ("stimulus-level Kendall tau-b agreement (sign turned for metrics where lower is better), best first; "
             "undefined last")


def _variance(name: str, n: int) -> float:
    return {"pearson": 1.0 / (n - 3), "spearman": 1.06 / (n - 3), "kendall": 0.437 / (n - 4)}[name]


def correlate(x: list[float], y: list[float], lower_is_better: bool) -> dict[str, Any]:
    """The three coefficients of (x, y), each with its agreement and interval (None when undefined)."""
    from scipy import stats

    n = len(x)
    out: dict[str, Any] = {"n": n}
    constant = n > 0 and (len(set(x)) == 1 or len(set(y)) == 1)
    sign = -1.0 if lower_is_better else 1.0
    z = float(stats.norm.ppf(0.5 + LEVEL / 2))
    for name in COEFFICIENTS:
        if n < 3 or constant:
            why = f"undefined: {n} points" if n < 3 else "undefined: constant values"
            out[name] = {"r": None, "agreement": None, "ci95": None, "note": why}
            continue
        fn = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}[name]
        r = float(fn(x, y).statistic)
        ci = None
        if n >= MIN_UNITS:
            centre = math.atanh(max(-1 + 1e-15, min(1 - 1e-15, r)))
            half = z * math.sqrt(_variance(name, n))
            lo, hi = math.tanh(centre - half), math.tanh(centre + half)
            ci = [lo, hi] if sign > 0 else [-hi, -lo]
        out[name] = {"r": r, "agreement": sign * r, "ci95": ci,
                     "note": "" if ci is not None else f"no interval: {n} points, fewer than {MIN_UNITS}"}
    return out


def metric_correlations(test: ListeningTest, runs: list[Run], stimulus_means: dict[tuple[str, str], float],
                        system_means: dict[str, float]) -> dict[str, Any]:
    """Every metric the codec conditions' rows hold, correlated with the listeners at both levels, and
    the ranking that follows. `stimulus_means`: (condition, trial) -> mean rating; `system_means`:
    condition -> MUSHRA mean."""
    codecs = [c for c in test.conditions if c.role == "codec"]
    if not system_means:
        return {"metrics": [], "ranking": [], "ranked_by": RANKED_BY}
    rows = {(c.id, t.id): runs[c.run].by_codec.get(c.codec or "", {}).get(t.utterance)  # type: ignore[index]
            for c in codecs for t in test.trials}
    names = sorted({m for row in rows.values() if row is not None for m, rec in row.metrics.items()
                    if rec["status"] == "ok"}, key=outputs.sort_key)
    languages = sorted({t.language for t in test.trials})
    results = []
    for name in names:
        lower = name in outputs.LOWER_IS_BETTER

        def value(cid: str, tid: str) -> float | None:
            row = rows[(cid, tid)]
            rec = row.metrics.get(name) if row is not None else None
            return float(rec["value"]) if rec is not None and rec["status"] == "ok" else None

        points = [(v, stimulus_means[(c.id, t.id)]) for c in codecs for t in test.trials
                  if (v := value(c.id, t.id)) is not None and (c.id, t.id) in stimulus_means]
        system = []
        if outputs.summarised(name, languages):
            for c in codecs:
                values = [value(c.id, t.id) for t in test.trials]
                if c.id in system_means and all(v is not None for v in values):
                    system.append((sum(values) / len(values), system_means[c.id]))  # type: ignore[arg-type]
        results.append({"metric": name, "label": outputs.LABELS.get(name, name), "lower_is_better": lower,
                        "stimulus": correlate([p[0] for p in points], [p[1] for p in points], lower),
                        "system": correlate([p[0] for p in system], [p[1] for p in system], lower)})

    def rank_key(entry: dict[str, Any]) -> tuple[bool, float, str]:
        agreement = entry["stimulus"]["kendall"]["agreement"]
        return (agreement is None, -(agreement or 0.0), entry["metric"])

    return {"metrics": results, "ranking": [e["metric"] for e in sorted(results, key=rank_key)],
            "ranked_by": RANKED_BY}
