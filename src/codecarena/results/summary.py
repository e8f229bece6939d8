"""Aggregates per codec configuration, recomputable from the rows alone.

Bitrates are aggregated two ways: the per-utterance mean, and the duration-weighted aggregate
(total bits / total seconds, with seconds always num_samples / sample_rate). Only rows whose stages
all succeeded count towards rates and costs; failures are listed with their reasons.

Every metric mean carries its 95% confidence interval (`ci95`): a percentile bootstrap over the
utterances' ok values, in utterance order, with a fixed seed, so the summary re-derives exactly.
Per-language summaries (`by_language`) have their own means and intervals.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from codecarena.results import robustness
from codecarena.results.bootstrap import LEVEL, bootstrap_ci
from codecarena.results.schema import Row

# 2: every metric's `ci95`, and the `ci` settings. Version 1 summaries (no intervals) still audit.
SUMMARY_VERSION = 2
CI_RESAMPLES = 2000
CI_SEED = 0
CI_SETTINGS = {"level": LEVEL, "resamples": CI_RESAMPLES, "seed": CI_SEED, "unit": "utterance",
               "method": "percentile bootstrap of the mean of the ok values, utterances in id order, "
                         "numpy default_rng(seed); none with fewer than 2 ok values"}


def mean_ci(values: list[float], units: list[str] | None = None) -> list[float] | None:
    """The 95% interval of the mean of `values` (given in utterance order), resampling utterances, or
    the `units` they belong to (one label per value: a speaker with all their utterances); None below
    2 values or 2 units."""
    if len(values) < 2 or (units is not None and len(set(units)) < 2):
        return None
    return list(bootstrap_ci(values, units, resamples=CI_RESAMPLES, seed=CI_SEED, level=LEVEL))


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _rates(rows: list[Row]) -> dict[str, Any]:
    ok = [r for r in rows if r.status == "ok"]
    seconds = sum(r.num_samples / r.sample_rate for r in ok)
    bits = sum(r.representation_bits or 0 for r in ok)
    payload_bytes = sum(r.payload_bytes or 0 for r in ok)
    return {
        "rows_ok": len(ok),
        "audio_s": seconds,
        "representation_bits": bits,
        "payload_bytes": payload_bytes,
        "representation_bps": bits / seconds if seconds else None,
        "payload_bps": payload_bytes * 8 / seconds if seconds else None,
        "representation_bps_mean": statistics.fmean(r.representation_bps or 0.0 for r in ok) if ok else None,
        "payload_bps_mean": statistics.fmean(r.payload_bps or 0.0 for r in ok) if ok else None,
    }


def _stage_costs(rows: list[Row], name: str) -> dict[str, Any]:
    stages = [s for r in rows if r.status == "ok" for s in r.stages if s.name == name]
    return {
        "cold_rtf_median": _median(s.cold_rtf for s in stages),
        "warm_rtf_median": _median(s.warm_rtf for s in stages),
        "peak_rss_bytes_max": max((s.peak_rss_bytes for s in stages), default=None),
    }


def metric_stats(scored: list[dict[str, Any]], with_ci: bool = True) -> dict[str, Any]:
    """Per metric output over several scored rows (in utterance order): mean over ok values with its
    95% interval, and counts (with reasons) of the rest; suspect values are counted, and averaged in
    only in `mean_with_suspect`."""
    names = list(dict.fromkeys(name for metrics in scored for name in metrics))
    stats: dict[str, Any] = {}
    for name in names:
        records = [metrics[name] for metrics in scored if name in metrics]
        values = [rec["value"] for rec in records if rec["status"] == "ok"]
        suspect = [rec["value"] for rec in records if rec["status"] == "suspect"]
        reasons: dict[str, int] = {}
        for rec in records:
            if rec["status"] == "failed":
                reasons[rec["error"]] = reasons.get(rec["error"], 0) + 1
        stats[name] = {
            "mean": statistics.fmean(values) if values else None,
            **({"ci95": mean_ci(values)} if with_ci else {}),
            "n_ok": len(values),
            "n_failed": sum(rec["status"] == "failed" for rec in records),
            "n_not_applicable": sum(rec["status"] == "not_applicable" for rec in records),
            "n_suspect": len(suspect),
            "mean_with_suspect": statistics.fmean(values + suspect) if values or suspect else None,
            "failure_reasons": reasons,
        }
    return stats


def summarize_codec(rows: list[Row], version: int = SUMMARY_VERSION) -> dict[str, Any]:
    first = rows[0]
    languages = sorted({r.language for r in rows})
    ci = version >= 2
    # The bootstrap resamples values by position: utterance order makes the interval independent of
    # the order rows finished in.
    in_order = sorted(rows, key=lambda r: r.utterance) if ci else rows
    return {
        "codec": first.codec,
        "family": first.family,
        "weights": first.weights,
        "variant": first.variant,
        "rows": len(rows),
        "rows_failed": sum(r.status != "ok" for r in rows),
        **_rates(rows),
        "metrics": metric_stats([r.metrics for r in in_order], ci),
        "by_language": {lang: {**_rates(sub), **({"utterances": len(sub)} if ci else {}),
                               "metrics": metric_stats([r.metrics for r in sub], ci)}
                        for lang in languages for sub in [[r for r in in_order if r.language == lang]]},
        "encode": _stage_costs(rows, "encode"),
        "decode": _stage_costs(rows, "decode"),
        "replay_sampled": sum(r.replay_sampled for r in rows),
        "replay_identical": sum(r.replay_identical is True for r in rows),
        "checks_passed": sum(r.checks_passed for r in rows),
        "clipped_samples": sum(r.clipped_samples or 0 for r in rows),
        "failures": [{"utterance": r.utterance, "error": r.error} for r in rows if r.error],
        # Only for a user codec (none existed before it could be labelled): its label, as the rows say.
        **({"user_codec": max(r.user_codec for r in rows)} if first.registry.startswith("user-") else {}),
    }


def summarize(rows: list[Row], version: int = SUMMARY_VERSION) -> dict[str, Any]:
    """The run's summary; `version` 1 re-derives a summary written before the intervals."""
    by_codec: dict[str, list[Row]] = {}
    for row in rows:
        by_codec.setdefault(row.codec, []).append(row)
    return {
        "version": version,
        "rows": len(rows),
        **({"ci": CI_SETTINGS} if version >= 2 else {}),
        "codecs": [summarize_codec(group, version) for group in by_codec.values()],
        # Only a run whose payloads crossed channels has curves (docs/channel.md).
        **({"channels": robustness.summary(rows)} if any(r.channel for r in rows) else {}),
    }
