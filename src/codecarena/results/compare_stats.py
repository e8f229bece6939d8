"""Paired statistics of one metric over the rows two runs share: the mean paired difference (B - A)
with a percentile bootstrap interval over utterances or speakers, or no interval below MIN_UNITS
units (speakers as the rows or the smoke manifest name them); identical decoded audio short-circuits
the statistics."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from codecarena.metrics import outputs
from codecarena.plural import counted, verb
from codecarena.results.bootstrap import LEVEL, MIN_UNITS, bootstrap_ci, few_units_warning
from codecarena.results.run import Run
from codecarena.results.schema import Row

IDENTICAL = "identical decoded audio: metrics cannot differ"


class CompareError(ValueError):
    """Two runs that cannot be compared as asked; the message is one line."""


def metric_record(row: Row, name: str) -> tuple[float | None, str | None]:
    """(value, None) for an ok metric, else (None, why it does not count)."""
    if row.status != "ok":
        return None, f"row failed ({row.error or 'no reason recorded'})"
    record = row.metrics.get(name)
    if record is None:
        return None, "not computed"
    if record["status"] != "ok":
        return None, f"{record['status']} ({record['error']})"
    return float(record["value"]), None


def metric_stats(name: str, pairs: list[tuple[str, Row, Row]], units: dict[str, str] | None, identical: bool,
                  resamples: int, seed: int, few_units: bool = False) -> dict[str, Any]:
    used: list[tuple[str, float, float]] = []
    dropped: dict[str, int] = {}
    for utt, ra, rb in pairs:
        va, why_a = metric_record(ra, name)
        vb, why_b = metric_record(rb, name)
        if why_a or why_b:
            reason = "; ".join(f"{side}: {why}" for side, why in (("A", why_a), ("B", why_b)) if why)
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        used.append((utt, va, vb))  # type: ignore[arg-type]
    out: dict[str, Any] = {"metric": name, "pairs": len(pairs), "n": len(used), "dropped": dropped,
                           "mean_a": None, "mean_b": None, "mean_diff": None, "ci_low": None, "ci_high": None,
                           "ci_width": None, "includes_zero": None, "units": None, "verdict": "", "warning": None}
    if not used:
        out["verdict"] = "no pair with an ok value on both sides"
        return out
    a = np.array([u[1] for u in used])
    b = np.array([u[2] for u in used])
    out["mean_a"], out["mean_b"] = float(a.mean()), float(b.mean())
    if identical:
        disagree = int(np.count_nonzero(a != b))
        out["values_disagree"] = disagree
        out["verdict"] = IDENTICAL
        if disagree:
            out["verdict"] += (f"; but {counted(disagree, 'pair')} {verb(disagree, 'carries', 'carry')} different "
                               "recorded values: the metric itself "
                               f"differs between the runs (see the metric declarations in provenance)")
        return out
    diffs = b - a
    out["mean_diff"] = float(diffs.mean())
    labels = [units[u[0]] for u in used] if units is not None else None
    out["units"] = len(set(labels)) if labels is not None else len(used)
    if out["units"] < 2:
        out["verdict"] = f"one resampling unit: no interval (mean difference {out['mean_diff']:+.4g})"
        return out
    unit = "speaker" if units is not None else "utterance"
    if out["units"] < MIN_UNITS and not few_units:
        # Every other surface withholds an interval here; a reading resting on one would claim more.
        out["verdict"] = (f"fewer than {MIN_UNITS} units: no interval, no reading (mean difference "
                          f"{out['mean_diff']:+.4g}; --few-units shows them, as descriptive)")
        out["warning"] = few_units_warning(out["units"], unit) + ", so none is given, nor a reading"
        return out
    low, high = bootstrap_ci(diffs, labels, resamples=resamples, seed=seed, level=LEVEL)
    out.update(ci_low=low, ci_high=high, ci_width=high - low, includes_zero=bool(low <= 0.0 <= high))
    if out["includes_zero"]:
        out["verdict"] = f"interval includes 0 (width {high - low:.4g}): not shown to differ, not shown equal"
    else:
        out["verdict"] = f"B {'higher' if low > 0 else 'lower'} than A: interval excludes 0"
        scale = outputs.BY_NAME.get(name)
        if scale is not None:
            better = (low > 0) != scale.lower_is_better
            out["verdict"] = (f"B {'better' if better else 'worse'} than A ({scale.better} is better): interval "
                              "excludes 0")
    if out["units"] < MIN_UNITS:
        out["warning"] = few_units_warning(out["units"], unit) + ": read it as descriptive"
    return out


def device_movement(names: list[str], pairs: list[tuple[str, Row, Row]]) -> list[dict[str, Any]]:
    """How far each metric moved between two devices: over the pairs with an ok value on both sides,
    the mean and the largest absolute difference."""
    moved = []
    for name in names:
        values = [(metric_record(ra, name)[0], metric_record(rb, name)[0]) for _, ra, rb in pairs]
        diffs = np.array([abs(b - a) for a, b in values if a is not None and b is not None])
        moved.append({"metric": name, "n": int(diffs.size),
                      "mean_abs_diff": float(diffs.mean()) if diffs.size else None,
                      "max_abs_diff": float(diffs.max()) if diffs.size else None})
    return moved


def decoded_same(pairs: list[tuple[str, Row, Row]]) -> int:
    return sum(1 for _, ra, rb in pairs if ra.decoded_sha256 and ra.decoded_sha256 == rb.decoded_sha256)


def speaker_units(run_a: Run, utterances: Iterable[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """utterance id -> speaker label, and notes on where the labels come from: the rows (version 4
    records the speaker), else the smoke manifest."""
    utterances = list(utterances)
    recorded = {row.utterance: row.speaker for row in run_a.rows if row.speaker}
    if recorded:
        mapping = {utt: f"speaker:{recorded[utt]}" if utt in recorded else f"utterance:{utt}" for utt, _ in utterances}
        own = [utt for utt, _ in utterances if utt not in recorded]
        notes = ["speakers as run A's rows record them"]
        if own:
            notes.append(f"{counted(len(own), 'utterance')} without a recorded speaker, each treated as its own "
                         "speaker: "
                         f"{', '.join(own)}")
        return mapping, notes
    if run_a.plan.set == "smoke":
        from codecarena.datasets import DatasetError, smoke_manifest

        try:
            entries = {e["id"]: e for e in smoke_manifest()["utterances"]}
        except DatasetError as exc:
            raise CompareError(f"--by speaker: cannot read the smoke manifest ({exc})") from None
        mapping, own = {}, []
        for utt, sha in utterances:
            entry = entries.get(utt)
            if entry and entry["speaker"] and entry["sha256"] == sha:
                mapping[utt] = f"speaker:{entry['speaker']}"
            else:
                mapping[utt] = f"utterance:{utt}"
                own.append(utt)
        notes = ["speakers from the smoke manifest (codecarena.datasets.smoke_manifest)"]
        if own:
            notes.append(f"{counted(len(own), 'utterance')} not in the smoke manifest with the same sha256 or "
                         "without a "
                         f"speaker, each treated as its own speaker: {', '.join(own)}")
        return mapping, notes
    return ({utt: f"utterance:{utt}" for utt, _ in utterances},
            [(f"set {run_a.plan.set!r} records no speakers: each utterance is treated as its own speaker "
              f"(the same as --by utterance)")])
