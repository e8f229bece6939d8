"""A row's verdict: is this row a problem, and why. The one rule the pipeline writes a row's status
by, the audit re-derives it by, and the run's log, the report and its Markdown summary show.

A row fails (status `failed`) when a stage failed or what the stages should have left is not there:
no payload, no decoded audio, a decoded length other than the reference's or off by more than the
codec's tolerance before restoration, or, in the replay sample, a second decode in a fresh process that
gave no audio or other bytes than the first (docs/plugins.md promises a byte-identical second decode,
so a decoder that is not deterministic fails its rows). A completed row whose decoded audio fails its
checks (non-finite or silent) stays `ok`, since its files and costs are real, but it is a problem too.
Everything is read from the row's own fields, so a status that disagrees with them (a forged one) is
found without the files; the reason shown is the row's recorded `error` when it has one, the exact
message of the step that failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codecarena.plural import counted
from codecarena.results.schema import Row

SILENT = "checks failed: decoded audio is silent"
NOT_FINITE = "checks failed: decoded audio is not finite"


@dataclass(frozen=True)
class Verdict:
    status: str  # "ok" or "failed": what the row's stages, outcome fields and replay give
    kind: str  # "" (no problem), "failed" (a stage or its outcome), "replay" (a failed replay) or "checks"
    reason: str  # one line: why the row is a problem; "" when it is none


def replay_failure(decoded_sha256: str | None, replay_sha256: str | None) -> str:
    """Why a row's replay fails it ("" when the second fresh decode gave the first one's bytes)."""
    if replay_sha256 is None:
        return "the replay (a second decode in a fresh process) gave no audio"
    if replay_sha256 != decoded_sha256:
        return (f"the second fresh decode differed from the first (sha256 {str(decoded_sha256)[:12]} then, "
                f"{replay_sha256[:12]} in the replay): the decoder is not deterministic")
    return ""


def checks_failure(finite: bool | None, silent: bool | None) -> str:
    """Why decoded audio fails its checks ("" when it is finite and not silent)."""
    if finite is not True:
        return NOT_FINITE
    return SILENT if silent is not False else ""


def settle(error: str, outcome: Mapping[str, Any]) -> tuple[str, bool, str]:
    """The pipeline's (status, checks_passed, error) for a row whose stages ended with `error` ("" when
    none failed) and left `outcome` (the row's outcome fields)."""
    if error:
        return "failed", False, error
    checks = checks_failure(outcome.get("finite"), outcome.get("silent"))
    return "ok", not checks, checks


def _failure(row: Row) -> tuple[str, str]:
    """(kind, reason) of what fails a row by its own fields; ("", "") when nothing does."""
    for stage in row.stages:
        if not stage.ok:
            return "failed", f"{stage.name}: {stage.error or 'failed'}"
    if row.payload is None or row.payload_sha256 is None:
        return "failed", "no payload was written"
    if row.decoded is None or row.decoded_sha256 is None:
        return "failed", "no decoded audio was written"
    if row.decoded_samples != row.num_samples:
        return "failed", (f"the decoded audio has {counted(row.decoded_samples, 'sample')}, the reference "
                          f"{row.num_samples}")
    off = (row.trimmed_samples or 0) + (row.padded_samples or 0)
    if row.length_tolerance is not None and off > row.length_tolerance:
        return "failed", (f"decoded length was off by {counted(off, 'sample')} before restoration, beyond the codec's "
                          f"tolerance of {row.length_tolerance}")
    if row.replay_sampled:
        replay = replay_failure(row.decoded_sha256, row.replay_sha256)
        if replay:
            return "replay", replay
    return "", ""


def verdict(row: Row) -> Verdict:
    """Whether `row` is a problem and why, from its stages, outcome fields, replay and checks."""
    kind, reason = _failure(row)
    if kind:
        return Verdict("failed", kind, row.error or reason)
    checks = checks_failure(row.finite, row.silent)
    if checks:
        return Verdict("ok", "checks", row.error or checks)
    return Verdict("ok", "", "")


def status_problem(row: Row) -> str:
    """How the row's recorded status disagrees with its verdict ("" when it agrees)."""
    derived = verdict(row)
    if derived.status == row.status:
        return ""
    if row.status == "ok":
        return f"status is ok, but the row failed: {_failure(row)[1]}"
    return ("status is failed, but its stages, files named and replay show no failure (was the status edited "
            "after it was computed?)")
