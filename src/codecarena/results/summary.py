"""Aggregates per codec configuration, recomputable from the rows alone.

Bitrates are aggregated two ways: the per-utterance mean, and the duration-weighted aggregate
(total bits / total seconds, with seconds always num_samples / sample_rate). Only rows whose stages
all succeeded count towards rates and costs; failures are listed with their reasons.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from codecarena.results.schema import Row

SUMMARY_VERSION = 1


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


def metric_stats(scored: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric output over several scored rows: mean over ok values, and counts (with reasons)
    of the rest; suspect values are counted, and averaged in only in `mean_with_suspect`."""
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
            "n_ok": len(values),
            "n_failed": sum(rec["status"] == "failed" for rec in records),
            "n_not_applicable": sum(rec["status"] == "not_applicable" for rec in records),
            "n_suspect": len(suspect),
            "mean_with_suspect": statistics.fmean(values + suspect) if values or suspect else None,
            "failure_reasons": reasons,
        }
    return stats


def summarize_codec(rows: list[Row]) -> dict[str, Any]:
    first = rows[0]
    languages = sorted({r.language for r in rows})
    return {
        "codec": first.codec,
        "family": first.family,
        "weights": first.weights,
        "variant": first.variant,
        "rows": len(rows),
        "rows_failed": sum(r.status != "ok" for r in rows),
        **_rates(rows),
        "metrics": metric_stats([r.metrics for r in rows]),
        "by_language": {lang: {**_rates(sub), "metrics": metric_stats([r.metrics for r in sub])}
                        for lang in languages for sub in [[r for r in rows if r.language == lang]]},
        "encode": _stage_costs(rows, "encode"),
        "decode": _stage_costs(rows, "decode"),
        "replay_sampled": sum(r.replay_sampled for r in rows),
        "replay_identical": sum(r.replay_identical is True for r in rows),
        "checks_passed": sum(r.checks_passed for r in rows),
        "clipped_samples": sum(r.clipped_samples or 0 for r in rows),
        "failures": [{"utterance": r.utterance, "error": r.error} for r in rows if r.error],
    }


def summarize(rows: list[Row]) -> dict[str, Any]:
    by_codec: dict[str, list[Row]] = {}
    for row in rows:
        by_codec.setdefault(row.codec, []).append(row)
    return {
        "version": SUMMARY_VERSION,
        "rows": len(rows),
        "codecs": [summarize_codec(group) for group in by_codec.values()],
    }
