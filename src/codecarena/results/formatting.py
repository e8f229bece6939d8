"""Numbers as people read them: the terminal tables, the report, the leaderboard and compare all
format through these, so one value reads the same everywhere. Exports and JSON keep full precision
and never pass through here."""

from __future__ import annotations

import math
from typing import Any

MIB = 2**20


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


def count(n: int, noun: str, plural: str = "") -> str:
    """`n` and the noun in the number `n` takes: "1 codec configuration", "3 codec configurations"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def fmt_mib(nbytes: float | None, digits: int = 0) -> str:
    """Bytes as MiB."""
    return "-" if nbytes is None else f"{nbytes / MIB:.{digits}f}"


# The RTF columns of every table (the run's, the leaderboard's, the report's and report.md's) in one
# order: warm before cold (warm is the codec call alone; cold adds process start, imports and model
# load), each cell encode/decode.
RTF_KINDS = ("warm", "cold")


def fmt_rtf(entry: dict[str, Any], kind: str) -> str:
    """An entry's median `kind` RTF ("warm" or "cold") as `encode/decode`; warm gets a fourth digit,
    being far smaller."""
    digits = 4 if kind == "warm" else 3
    return "/".join(fmt_num(entry[stage][f"{kind}_rtf_median"], digits) for stage in ("encode", "decode"))


def weights_label(weights: str, user_codec: str = "") -> str:
    """How a row's weights kind reads: `user` is a checkpoint the user pinned, not the registry; a user
    codec (`user_codec`: its source hash, or "command line") is labelled as one, whatever its weights."""
    if user_codec:
        return f"user codec {user_codec}"
    return "pinned by user" if weights == "user" else weights


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


def metric_cell(stats: dict[str, Any] | None) -> str:
    """A metric's mean over successes, then how many values failed or did not apply."""
    if not stats:
        return "-"
    counts = _counts(stats)
    return fmt_num(stats["mean"]) + (f" {counts}" if counts else "")


def metric_ci_cell(stats: dict[str, Any] | None, rows_ok: int | None = None) -> str:
    """`metric_cell` with the mean's 95% interval as +- half its width, and the number of ok values
    when it differs from the rows the entry has (`rows_ok`)."""
    if not stats or stats.get("mean") is None:
        return metric_cell(stats)
    ci = stats.get("ci95")
    text = fmt_num(stats["mean"]) + (f" +-{fmt_num((ci[1] - ci[0]) / 2)}" if ci else "")
    if rows_ok is not None and stats["n_ok"] != rows_ok:
        text += f" (n {stats['n_ok']})"
    counts = _counts(stats)
    return text + (f"\n{counts}" if counts else "")
