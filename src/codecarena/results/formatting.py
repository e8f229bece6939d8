"""Numbers as people read them: the terminal tables, the report, the leaderboard and compare all
format through these, so one value reads the same everywhere; and where a codec configuration may be
wrapped. Exports and JSON keep full precision and never pass through here."""

from __future__ import annotations

import math
import re
from typing import Any

from codecarena.plural import counted
from codecarena.results.bootstrap import MIN_UNITS, few_units_warning, unit_count

MIB = 2**20
# What a row's empty language reads as, wherever a language is named.
NO_LANGUAGE = "(no language declared)"


def fmt_num(value: float | None, digits: int = 3) -> str:
    """Fixed point; '-' for a missing or non-finite value."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}"


def fmt_signed(value: float | None, digits: int = 4) -> str:
    """Fixed point with its sign always shown (differences); '-' for a missing value."""
    return "-" if value is None else f"{value:+.{digits}f}"


def fmt_kbps(bps: float | None, digits: int = 3) -> str:
    """Bits per second as kbps."""
    return "-" if bps is None else f"{bps / 1000:.{digits}f}"


def fmt_mib(nbytes: float | None, digits: int = 0) -> str:
    """Bytes as MiB."""
    return "-" if nbytes is None else f"{nbytes / MIB:.{digits}f}"


# The RTF columns of every table (the run's, the leaderboard's, the report's and report.md's) in one
# order: warm before cold (warm is the codec call alone; cold adds process start, imports and model
# load), each cell encode/decode.
RTF_KINDS = ("warm", "cold")


def fmt_rtf(entry: dict[str, Any], kind: str, sep: str = "\n") -> str:
    """An entry's median `kind` RTF ("warm" or "cold") as `encode/decode`; warm gets a fourth digit,
    being far smaller, and after `sep` the rows its medians are over (warm_n)."""
    digits = 4 if kind == "warm" else 3
    text = "/".join(fmt_num(entry[stage][f"{kind}_rtf_median"], digits) for stage in ("encode", "decode"))
    n = warm_n(entry) if kind == "warm" else ""
    return f"{text}{sep}{n}" if n else text


def warm_n(entry: dict[str, Any]) -> str:
    """How many rows an entry's warm RTF medians are over, `n=3` (`n=3/2`, encode/decode, where they
    differ): only the warm sample's rows have a warm RTF. "" where the entry does not say (summary.json
    before version 6)."""
    counts = [entry[stage].get("warm_rtf_n") for stage in ("encode", "decode")]
    if None in counts:
        return ""
    return f"n={counts[0]}" if counts[0] == counts[1] else f"n={counts[0]}/{counts[1]}"


def language_label(language: str | None) -> str:
    """A language as people read it: an empty one is said to be undeclared, never shown as nothing."""
    return language or NO_LANGUAGE


def fmt_interval(ci: list[float] | tuple[float, float], digits: int = 3) -> str:
    """An interval as `[lo, hi]`: both ends, so an asymmetric interval reads as one (never as +- half)."""
    return f"[{fmt_num(ci[0], digits)}, {fmt_num(ci[1], digits)}]"


def _ci_basis(stats: dict[str, Any]) -> tuple[int, str]:
    """How many units a mean's interval resamples, and which; a summary before version 3 named neither:
    its intervals resampled the ok values' utterances."""
    return stats.get("ci_units", stats["n_ok"]), stats.get("ci_unit", "utterance")


def shown_interval(stats: dict[str, Any] | None) -> list[float] | None:
    """A mean's 95% interval as every surface shows it: None below the bound, whatever computed it."""
    if not stats or not stats.get("ci95") or _ci_basis(stats)[0] < MIN_UNITS:
        return None
    return list(stats["ci95"])


def _interval_parts(stats: dict[str, Any]) -> tuple[str | None, str, str]:
    """A mean's interval as `[lo, hi]` (None below the bound), the units it rests on as words, and its
    longer reading."""
    n, unit = _ci_basis(stats)
    ci = shown_interval(stats)
    if ci:
        return (fmt_interval(ci), f"n={unit_count(n, unit)}",
                f"95% percentile bootstrap interval of the mean, resampling {unit_count(n, unit)}")
    return (None, f"n={unit_count(n, unit)}: no interval, fewer than {MIN_UNITS}",
            few_units_warning(n, unit) + ", so none is given; read the mean as descriptive")


def interval_text(stats: dict[str, Any] | None) -> str:
    """What stands beside a mean about its 95% interval: `[lo, hi] n=12 utterances`, or below the bound
    `n=3 utterances: no interval, fewer than 10`; "" for no mean."""
    if not stats or stats.get("mean") is None:
        return ""
    interval, basis, _ = _interval_parts(stats)
    return f"{interval} {basis}" if interval else basis


def interval_title(stats: dict[str, Any]) -> str:
    """The longer reading of `interval_text` (a tooltip): what the interval is, or why there is none."""
    return _interval_parts(stats)[2]


def withheld_basis(stats: dict[str, Any] | None) -> str:
    """What a mean without an interval rests on, short (`n=3`), for a table that says once why there is
    none (`interval_text` says it whole); "" for a mean with an interval, or no mean."""
    if not stats or stats.get("mean") is None or shown_interval(stats):
        return ""
    return f"n={_ci_basis(stats)[0]}"


# A codec configuration (`opus:24k,fec=10@burst=10%,len=3`) may be broken only before an `@` (its channel)
# or after a `,` (between options): anywhere else it would split a `key=value`.
_SPEC_BREAKS = re.compile(r"(?<=,)|(?=@)")


def spec_parts(spec: str) -> list[str]:
    """The pieces a codec configuration may be wrapped between, in order: `opus:24k,` `fec=10`
    `@burst=10%,` `len=3`."""
    return [part for part in _SPEC_BREAKS.split(spec) if part]


EXTERNAL_MARK = "† external runtime"


def weights_label(weights: str, user_codec: str = "", runtime: str = "") -> str:
    """How a row's weights kind reads: `user` is a checkpoint the user pinned, not the registry; a user
    codec (`user_codec`: its source hash, or "command line") is labelled as one, whatever its weights.
    Rows made in an external runtime (`runtime` "external", --runtime-python) are marked as not the
    pinned runtime."""
    label = f"user codec {user_codec}" if user_codec else "pinned by user" if weights == "user" else weights
    return f"{label} {EXTERNAL_MARK}" if runtime == "external" else label


def _counts(stats: dict[str, Any]) -> str:
    """How many of a metric's values were suspect, failed or did not apply, as "(...)"; "" for none."""
    extra = []
    if stats.get("n_suspect"):
        extra.append(f"{stats['n_suspect']} suspect: {fmt_num(stats['mean_with_suspect'])} with them")
    if stats["n_failed"]:
        extra.append(f"{stats['n_failed']} failed")
    if stats["n_not_applicable"]:
        extra.append(f"{stats['n_not_applicable']} n/a")
    return f"({', '.join(extra)})" if extra else ""


def suspect_lines(problems: list[dict[str, Any]], run_labels: list[str] | None = None) -> list[str]:
    """One line per configuration and metric output with suspect values, from a leaderboard's metric
    problems (`run_labels`: name the run when there are several), so that they show whichever columns a
    table has: `opus:6k: 1 dCER value suspect, kept out of the mean (zh_3): why`."""
    from codecarena.metrics import outputs  # not at the top: the command line's parser imports this module

    lines = []
    for p in problems:
        if p["status"] != "suspect":
            continue
        run = f"{run_labels[p['run_index']]} " if run_labels and len(run_labels) > 1 else ""
        label = outputs.LABELS.get(p["output"], p["output"])
        lines.append(f"{run}{p['codec']}: {counted(p['n'], f'{label} value')} suspect, kept out of the mean "
                     f"({', '.join(p['utterances'])}): {p['error']}")
    return lines


def metric_cell(stats: dict[str, Any] | None) -> str:
    """A metric's mean over successes, then how many values failed or did not apply."""
    if not stats:
        return "-"
    counts = _counts(stats)
    return fmt_num(stats["mean"]) + (f" {counts}" if counts else "")


def metric_ci_cell(stats: dict[str, Any] | None) -> str:
    """A terminal table's cell: the mean and its 95% interval as [lo, hi], on the next line `n=12` (the
    units resampled; the table's heading names them) or `n=3, no interval` below the bound, then the
    counts."""
    if not stats or stats.get("mean") is None:
        return metric_cell(stats)
    ci = shown_interval(stats)
    n, _ = _ci_basis(stats)
    counts = _counts(stats)
    corpus = corpus_text(stats)
    return (fmt_num(stats["mean"]) + (f" {fmt_interval(ci)}\nn={n}" if ci else f"\nn={n}, no interval")
            + (f"\n{corpus}" if corpus else "") + (f"\n{counts}" if counts else ""))


def corpus_text(stats: dict[str, Any]) -> str:
    """An error rate's corpus rate (total errors over total reference tokens), beside the mean of the
    per-utterance rates it differs from: `corpus 0.298 (31/104)`; "" for other outputs or without counts."""
    if stats.get("corpus_rate") is None:
        return ""
    return f"corpus {fmt_num(stats['corpus_rate'])} ({stats['corpus_errors']}/{stats['corpus_tokens']})"


def metric_ci_text(stats: dict[str, Any] | None) -> str:
    """`metric_ci_cell` on one line, the units named: `3.214 [3.091, 3.337] n=12 utterances (1 failed)`."""
    if not stats or stats.get("mean") is None:
        return metric_cell(stats)
    counts, corpus = _counts(stats), corpus_text(stats)
    return (f"{fmt_num(stats['mean'])} {interval_text(stats)}" + (f"; {corpus}" if corpus else "")
            + (f" {counts}" if counts else ""))
