"""Aggregates per codec configuration, recomputable from the rows alone.

Bitrates are aggregated two ways: the per-utterance mean, and the duration-weighted aggregate
(total bits / total seconds, with seconds always num_samples / sample_rate). Only rows whose stages
all succeeded count towards rates and costs; failures are listed with their reasons.

Every metric mean carries its 95% confidence interval (`ci95`): a percentile bootstrap over the
utterances' ok values, in utterance order, with a fixed seed, so the summary re-derives exactly; with
fewer than `bootstrap.MIN_UNITS` values there is none (`ci95` null), and `ci_unit` and `ci_units` say
what was resampled and how many. Per-language summaries (`by_language`) have their own means and
intervals. An error rate (WER, CER and their kin) also has its corpus rate, total errors over total
reference tokens, from the counts each row records; it counts each language's own words or
characters, so it is summarised only per language, and a word error rate only for a language written
with spaces (metrics/outputs.py).
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from codecarena.metrics import outputs
from codecarena.results import condition_curves, robustness
from codecarena.results.bootstrap import LEVEL, MIN_UNITS, bootstrap_ci
from codecarena.results.schema import Row

# 2: every metric's `ci95`, and the `ci` settings. 3: no interval below MIN_UNITS values, and each
# metric's `ci_unit` and `ci_units`; error rates summarised only per language (and a word error rate
# only for a language written with spaces), with their corpus rates. 4: a run with channels reads its
# robustness at the realised rates, with each point's counts (results/robustness.py). 5: a run with input
# conditions has `conditions` (results/condition_curves.py) and each conditioned configuration its metrics
# against the conditioned input (`input_metrics`). 6: each channel point's `tokens_changed_fraction`, and each
# stage's `warm_rtf_n`, the rows its warm RTF median is over (only the rows of the warm sample have one, run.json
# `warm_sample`). Version 1 (no intervals), 2, 3, 4 and 5 summaries still audit: `summarize` re-derives each in
# the version it was written in.
SUMMARY_VERSION = 6
SUMMARY_VERSIONS = (1, 2, 3, 4, 5, 6)
CI_RESAMPLES = 2000
CI_SEED = 0
_CI_V2 = {"level": LEVEL, "resamples": CI_RESAMPLES, "seed": CI_SEED, "unit": "utterance",
          "method": "percentile bootstrap of the mean of the ok values, utterances in id order, "
                    "numpy default_rng(seed); none with fewer than 2 ok values"}
CI_SETTINGS = {**_CI_V2, "min_units": MIN_UNITS,
               "method": "percentile bootstrap of the mean of the ok values, utterances in id order, "
                         f"numpy default_rng(seed); none with fewer than {MIN_UNITS} ok values"}


def resampling_units(values: list[float], units: list[str] | None = None) -> int:
    """How many units a bootstrap of `values` resamples: the values, or the distinct `units` labels."""
    return len(values) if units is None else len(set(units))


def mean_ci(values: list[float], units: list[str] | None = None, min_units: int = MIN_UNITS) -> list[float] | None:
    """The 95% interval of the mean of `values` (given in utterance order), resampling utterances, or
    the `units` they belong to (one label per value: a speaker with all their utterances); None below
    `min_units` units (and always below 2)."""
    if resampling_units(values, units) < max(2, min_units):
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


def _stage_costs(rows: list[Row], name: str, version: int) -> dict[str, Any]:
    """A stage's median RTFs and peak RSS over the ok rows; the warm RTF's median is over the rows that
    have one (a cold row outside the warm sample has none), and from version 6 says how many they are."""
    stages = [s for r in rows if r.status == "ok" for s in r.stages if s.name == name]
    warm = [s.warm_rtf for s in stages if s.warm_rtf is not None]
    return {
        "cold_rtf_median": _median(s.cold_rtf for s in stages),
        "warm_rtf_median": _median(warm),
        **({"warm_rtf_n": len(warm)} if version >= 6 else {}),
        "peak_rss_bytes_max": max((s.peak_rss_bytes for s in stages), default=None),
    }


def _corpus(records: list[dict[str, Any]]) -> dict[str, Any]:
    """An error rate's total errors, total reference tokens and their ratio over the ok records; None
    where an ok record does not carry its counts (rows scored before they were recorded)."""
    ok = [rec for rec in records if rec["status"] == "ok"]
    counts = [c for c in map(outputs.error_counts, ok) if c is not None]
    if not ok or len(counts) != len(ok):
        return {"corpus_rate": None, "corpus_errors": None, "corpus_tokens": None}
    errors, tokens = sum(e for e, _ in counts), sum(t for _, t in counts)
    return {"corpus_rate": errors / tokens, "corpus_errors": errors, "corpus_tokens": tokens}


def metric_stats(scored: list[dict[str, Any]], version: int = SUMMARY_VERSION,
                 languages: Iterable[str] | None = None) -> dict[str, Any]:
    """Per metric output over several scored rows (in utterance order): mean over ok values with its
    95% interval over utterances (from version 2; from version 3 none below MIN_UNITS values, with the
    unit and how many), and counts (with reasons) of the rest; suspect values are counted, and averaged
    in only in `mean_with_suspect`. With `languages` (those of the rows; from version 3), an error rate
    gets its corpus rate, and an output whose mean would mean nothing over them (an error rate over
    several languages, a word error rate of a language written without spaces) is left out."""
    names = list(dict.fromkeys(name for metrics in scored for name in metrics))
    if languages is not None:
        languages = set(languages)
        names = [name for name in names if outputs.summarised(name, languages)]
    stats: dict[str, Any] = {}
    for name in names:
        records = [metrics[name] for metrics in scored if name in metrics]
        values = [rec["value"] for rec in records if rec["status"] == "ok"]
        suspect = [rec["value"] for rec in records if rec["status"] == "suspect"]
        reasons: dict[str, int] = {}
        for rec in records:
            if rec["status"] == "failed":
                reasons[rec["error"]] = reasons.get(rec["error"], 0) + 1
        interval: dict[str, Any] = {}
        if version == 2:
            interval = {"ci95": mean_ci(values, min_units=2)}
        elif version >= 3:
            interval = {"ci95": mean_ci(values), "ci_unit": "utterance", "ci_units": len(values)}
        stats[name] = {
            "mean": statistics.fmean(values) if values else None,
            **interval,
            "n_ok": len(values),
            "n_failed": sum(rec["status"] == "failed" for rec in records),
            "n_not_applicable": sum(rec["status"] == "not_applicable" for rec in records),
            "n_suspect": len(suspect),
            "mean_with_suspect": statistics.fmean(values + suspect) if values or suspect else None,
            "failure_reasons": reasons,
            **(_corpus(records) if languages is not None and name in outputs.ERROR_RATES else {}),
        }
    return stats


def summarize_codec(rows: list[Row], version: int = SUMMARY_VERSION) -> dict[str, Any]:
    first = rows[0]
    languages = sorted({r.language for r in rows})
    ci = version >= 2
    per_language = version >= 3
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
        "metrics": metric_stats([r.metrics for r in in_order], version, languages if per_language else None),
        # Only a configuration with a condition: its metrics against the conditioned input (docs/conditions.md).
        **({"input_metrics": metric_stats([r.input_metrics or {} for r in in_order], version,
                                          languages if per_language else None)}
           if version >= 5 and "%" in first.codec.partition("@")[0] else {}),
        "by_language": {lang: {**_rates(sub), **({"utterances": len(sub)} if ci else {}),
                               "metrics": metric_stats([r.metrics for r in sub], version,
                                                       [lang] if per_language else None)}
                        for lang in languages for sub in [[r for r in in_order if r.language == lang]]},
        "encode": _stage_costs(rows, "encode", version),
        "decode": _stage_costs(rows, "decode", version),
        "replay_sampled": sum(r.replay_sampled for r in rows),
        "replay_identical": sum(r.replay_identical is True for r in rows),
        "checks_passed": sum(r.checks_passed for r in rows),
        "clipped_samples": sum(r.clipped_samples or 0 for r in rows),
        "failures": [{"utterance": r.utterance, "error": r.error} for r in rows if r.error],
        # Only for a user codec (none existed before it could be labelled): its label, as the rows say.
        **({"user_codec": max(r.user_codec for r in rows)} if first.registry.startswith("user-") else {}),
        # Only for rows made in an interpreter named with --runtime-python (none could be before it existed).
        **({"runtime": "external"} if any(r.external_runtime for r in rows) else {}),
    }


def summarize(rows: list[Row], version: int = SUMMARY_VERSION) -> dict[str, Any]:
    """The run's summary; an earlier `version` (SUMMARY_VERSIONS) re-derives a summary written by it."""
    by_codec: dict[str, list[Row]] = {}
    for row in rows:
        by_codec.setdefault(row.codec, []).append(row)
    return {
        "version": version,
        "rows": len(rows),
        **({"ci": CI_SETTINGS if version >= 3 else _CI_V2} if version >= 2 else {}),
        "codecs": [summarize_codec(group, version) for group in by_codec.values()],
        # Only a run whose payloads crossed channels has curves (docs/channel.md).
        **({"channels": robustness.summary(rows, version)} if any(r.channel for r in rows) else {}),
        # Only a run whose inputs went through conditions (docs/conditions.md).
        **({"conditions": condition_curves.summary(rows, mean_ci)}
           if version >= 5 and any(r.condition for r in rows) else {}),
    }
