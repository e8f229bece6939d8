"""Re-derive a run from its files: every aggregate, size, hash, length and guard record.

The auditor trusts nothing the run wrote about itself that it can recompute: payload sizes and
representation bits come from parsing the payload files, audio facts from reading the wavs, and
the summary from the verified rows. One row's checks are `audit_rows.py`; the channel's, the
conditions' and the listening tests' are their own modules.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from codecarena.files import json_differences, sha256_file
from codecarena.metrics.reference_results import (Entry, ReferenceResultError, entries, parse_entry, reliances,
                                                   value_sha256)
from codecarena.plural import counted, verb
from codecarena.registry import libraries, user_units
from codecarena.rundir import RunDir, StageFiles, UnsafePathError
from codecarena.runtime.venvs import sync_interpreter
from codecarena.runtime.limits import StageLimits, default_memory_limit
from codecarena.runtime.protocol import Job
from codecarena.runtime.stages import run_stage
from codecarena.sandbox import for_family
from codecarena.results.audit_rows import digest_problem, row_problems
from codecarena.results.listening.audit import listening_problems
from codecarena.results.channel_audit import decoder_input
from codecarena.results.condition_audit import condition_problems, hop_replay_problems
from codecarena.results.ledger import ledger_problems
from codecarena.results.record import Plan, PlanUserCodec, RunLoadError, RunRecord
from codecarena.results.rescore import Sample, rescore_problems
from codecarena.results.run import Run
from codecarena.results.schema import Row
from codecarena.results.summary import SUMMARY_VERSION, SUMMARY_VERSIONS, summarize


def external_runtime_problems(plan: Plan, rows: list[Row]) -> list[str]:
    """A row must say it ran in an external runtime exactly when the plan runs its family in one
    (--runtime-python): the label of every table depends on it."""
    external = {entry[0]: entry[2] for entry in plan.runtimes if entry[3:] == ["external"]}
    problems = []
    for row in rows:
        if row.status == "ok" and row.external_runtime != (row.family in external):
            said = "says it ran in an external runtime" if row.external_runtime else "does not say it ran in the external runtime"
            problems.append(f"{row.codec} {row.utterance}: the row {said}, the plan runs {row.family} in "
                            f"{external.get(row.family) or 'its pinned runtime'}")
    return problems


def external_runtime_notes(record: RunRecord) -> list[str]:
    """What the audit says of a run whose rows came (in part) from an external runtime: accepted, and
    not the pinned runtime."""
    return [f"{entry[0]}: rows ran in the external runtime {entry[2]} (--runtime-python), not the pinned runtime "
            f"{entry[1]}" for entry in record.plan.runtimes if entry[3:] == ["external"]]


def checkpoint_problems(rows: list[Row]) -> list[str]:
    """One configuration, one model: the rows of a codec configuration whose payloads record a
    checkpoint all record the same one, so no summary averages two models."""
    identities: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.checkpoint and row.checkpoint not in identities.setdefault(row.codec, []):
            identities[row.codec].append(row.checkpoint)
    return [f"{codec}: its rows carry {len(found)} different checkpoint identities ({found}); a configuration's rows "
            f"must come from one model" for codec, found in identities.items() if len(found) > 1]


def reference_result_problems(rows: list[Row], run: RunDir) -> list[str]:
    """The reference-side results (metrics/reference_results.py) against the rows: every entry parses
    and belongs to a reference of the run, and every entry a row's metric records relied on (its
    reference transcript, its reference's speaker embedding) is stored with the very value the row
    recorded, so no row was scored against another transcript or embedding than the run keeps."""
    problems: list[str] = []
    stored: dict[tuple[str, str, str], Entry] = {}
    references = {sha for row in rows for sha, _ in row.scored_against}
    root = run.reference_results()
    for path in entries(root):
        try:
            entry = parse_entry(path)
        except ReferenceResultError as exc:
            problems.append(str(exc))
            continue
        if entry.reference_sha256 not in references:
            problems.append(f"{path}: no row of the run has this reference (sha256 {entry.reference_sha256[:12]})")
        stored[(entry.kind, entry.reference_sha256, entry.identity_sha256)] = entry
    what = {"asr_transcript": "reference transcript", "speaker_embedding": "reference's speaker embedding"}
    for row in rows:
        where = f"{row.codec} {row.utterance}"
        relied = set().union(*(reliances(sha, metrics) for sha, metrics in row.scored_against))
        for need in sorted(relied, key=lambda r: r.kind):
            entry = stored.get((need.kind, need.reference_sha256, need.identity_sha256))
            if entry is None:
                problems.append(f"{where}: its {what[need.kind]} is not in {root}")
            elif value_sha256(entry.value) != need.value_sha256:
                cached = repr(entry.value) if need.kind == "asr_transcript" else f"sha256 {value_sha256(entry.value)[:12]}"
                problems.append(f"{where}: scored against the {what[need.kind]} {need.shown}, the run's cached one "
                                f"is {cached}")
        speaker = row.metrics.get("speaker_sim")
        details = speaker.get("details") if isinstance(speaker, dict) else None
        if isinstance(speaker, dict) and speaker.get("status") == "ok" and \
                not (isinstance(details, dict) and isinstance(details.get("reference_embedding"), dict)):
            problems.append(f"{where}: its speaker_sim does not name the reference embedding it was scored against")
    return problems


class ReplayDeviceError(ValueError):
    """A replay that would need a device this machine cannot give (one line; nothing is replayed)."""


def replay_targets(rows: list[Row], run_dir: Path, python: str, interpreters: dict[str, str],
                   replay_device: str | None = None) -> dict[tuple[str, str], str]:
    """(codec, utterance) -> the device each payload's replay decodes on: where the row was made, or with
    `replay_device`, that device for a torch family's rows (the CPU for the others). Every device other
    than the CPU is asked of the runtime that will decode there first; ReplayDeviceError when one cannot."""
    from codecarena.devices import DeviceError, probe

    targets: dict[tuple[str, str], str] = {}
    asked: dict[tuple[str, str], str] = {}  # (interpreter, device) -> the device the rows were made on
    for row in rows:
        if row.status != "ok" or row.payload is None:
            continue
        made = row.ran_on
        applied = bool(row.device and row.device.get("applied"))
        target = made if replay_device is None else replay_device if applied else "cpu"
        targets[row.key] = target
        if target != "cpu":
            asked.setdefault((interpreters.get(row.registry, python), target), made)
    for (interpreter, device), made in asked.items():
        try:
            probe(interpreter, device)
        except DeviceError as exc:
            if replay_device is not None:
                raise ReplayDeviceError(f"--replay-device {device}: {exc}") from None
            raise ReplayDeviceError(f"audit --replay: the rows of {run_dir} were made on {made} and their replay needs "
                                    f"it: {exc}; pass --replay-device cpu to replay them on the CPU as a cross-device "
                                    "comparison") from None
    return targets


def replay_problems(run: Run, python: str, interpreters: dict[str, str] | None = None,
                    targets: dict[tuple[str, str], str] | None = None,
                    notes: list[str] | None = None) -> list[str]:
    """Decode every payload again in a fresh worker, on its target device (`targets`, default: the CPU),
    and compare with the stored decoded audio. A payload replayed on another device than the one its
    row was made on is a cross-device comparison: a differing decode is counted in `notes`, not a problem."""
    problems: list[str] = []
    crossed: dict[tuple[str, str], list[bool]] = {}  # (made on, replayed on) -> identical per payload
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for row in run.rows:
            if row.status != "ok" or row.payload is None:
                continue
            try:
                payload = decoder_input(row, run.dir)
            except UnsafePathError:
                continue  # reported by the file checks; never decode a file outside the run
            out = work / "audit.wav"
            files = StageFiles.scratch(work, "audit-replay")
            device = (targets or {}).get(row.key, "cpu")
            job = Job.decode(payload, out, files.report, device=device)
            limits = row.limits or StageLimits(default_memory_limit())
            stage, _ = run_stage("audit-replay", job, limits, files, (interpreters or {}).get(row.registry, python),
                                 sandbox=for_family(row.family))
            where = f"{row.codec} {row.utterance}"
            if not stage.ok:
                problems.append(f"{where}: fresh decode for audit on {device} failed: {stage.error}")
            elif device != row.ran_on:
                crossed.setdefault((row.ran_on, device), []).append(sha256_file(out) == row.decoded_sha256)
            elif sha256_file(out) != row.decoded_sha256:
                problems.append(f"{where}: a fresh decode of the payload differs from {row.decoded}")
    for (made, device), identical in sorted(crossed.items()):
        if notes is not None:
            differ = len(identical) - sum(identical)
            notes.append(f"replay on {device} of {counted(len(identical), 'payload')} made on {made}: {sum(identical)} "
                         f"decoded byte-identical to the run's audio, {differ} {verb(differ, 'differs', 'differ')} "
                         "(a cross-device "
                         "comparison: another device is another configuration, so a difference is not a failure)")
    return problems


def user_codec_problems(pinned: list[PlanUserCodec]) -> list[str]:
    """A user codec whose source, or a shared library its programs load, as it is now on this machine, is
    not the one the run pinned: its payloads can no longer be replayed by the code that made them, and
    the run should say so."""
    problems = []
    for codec in pinned:
        problems += [f"user codec {codec.name}: {line}; the run's payloads were made by the library it had then"
                     for line in libraries.changed(codec.libraries or ())]
        try:
            unit = user_units.load(codec.name)
        except user_units.UserUnitError as exc:
            problems.append(f"user codec {codec.name}: the run used it, but it cannot be read here ({exc})")
            continue
        if codec.source_sha256 is None or unit.source is None:
            continue
        try:
            now = unit.source.current_sha256()
        except user_units.UserUnitError as exc:
            problems.append(f"user codec {codec.name}: {exc}")
            continue
        if now != codec.source_sha256:
            problems.append(f"user codec {codec.name}: its source {unit.source.path} changed since the run (sha256 "
                            f"{codec.source_sha256[:12]}... then, {now[:12]}... now); the run's payloads were made "
                            "by the code it had then")
    return problems


def audit(run_dir: Path, replay: bool = False, python: str | None = None,
          rescore: Sample | None = None, replay_device: str | None = None,
          notes: list[str] | None = None) -> list[str]:
    """Every disagreement found, one line each; an empty list means the run re-derives (a run that
    cannot be loaded is its one line). `rescore` (rows per codec configuration, or "all") also
    recomputes those rows' metric values. `replay` decodes every payload again on the device its row
    was made on, or on `replay_device`; a device this machine cannot give raises ReplayDeviceError
    before anything is checked. What is worth saying but is no problem goes to `notes`: cross-device
    replays, and when the audit passes, the rows accepted from an external runtime."""
    try:
        run = Run.open(run_dir)
    except RunLoadError as exc:
        return [str(exc)]
    record, rows = run.record, run.rows
    interpreters = {rid: rec["interpreter"] for rid, rec in record.runtimes.items()
                    if rec.get("environment") in ("isolated", "external")}
    targets = replay_targets(rows, run_dir, python or sys.executable, interpreters, replay_device) if replay else {}
    problems = _record_problems(run)
    references = {row.utterance: row.reference for row in rows}
    for row in rows:
        where = f"{row.codec} {row.utterance}"
        try:
            problems += row_problems(row, run.dir, where)
            problems += condition_problems(row, run.dir, record.plan, references, where)
            problems += [f"{where}: {problem}" for problem in record.plan.row_problems(row)]
            if record.plan.references is not None and not row.intact:
                problems.append(f"{where}: {digest_problem(row)}")
        except Exception as exc:  # a row the checks cannot handle fails the audit, never crashes it
            problems.append(f"{where}: the audit could not check this row ({type(exc).__name__}: {exc})")
    problems += checkpoint_problems(rows)
    problems += external_runtime_problems(record.plan, rows)
    problems += reference_result_problems(rows, run.dir)
    problems += user_codec_problems(record.plan.user_codecs or [])
    problems += _summary_problems(run)
    problems += listening_problems(run, notes)
    if replay:
        for rid, interpreter in interpreters.items():
            if record.runtimes[rid].get("environment") == "isolated":
                sync_interpreter(interpreter)
        problems += replay_problems(run, python or sys.executable, interpreters, targets, notes)
        by_family = {family: interpreters.get(registry_id, python or sys.executable)
                     for family, registry_id, *_ in record.plan.runtimes}
        problems += hop_replay_problems(rows, run.dir, python or sys.executable, by_family)
    if rescore is not None:
        problems += rescore_problems(run, rescore)
    if not problems and notes is not None:
        notes += external_runtime_notes(record)
    return problems


def _record_problems(run: Run) -> list[str]:
    """What run.json and the set of rows say of the run as a whole: finished, untorn, its plan's hash,
    one row per planned codec x utterance, a plan that pins what the rows were computed from."""
    record, files = run.record, run.dir
    problems: list[str] = []
    if run.torn:
        problems.append(f"{files.rows}: ends with a torn line (the run was interrupted; rerun it)")
    if not record.finished:
        problems.append(f"{files.run_json}: the run did not finish (rerun the same command to resume)")
    if record.plan.sha256 != record.plan_sha256:
        problems.append(f"{files.run_json}: plan_sha256 is not the sha256 of the plan")
    wanted = record.plan.keys()
    seen: dict[tuple[str, str], int] = {}
    for row in run.rows:
        seen[row.key] = seen.get(row.key, 0) + 1
    for key, count in seen.items():
        if count > 1:
            problems.append(f"{key[0]} {key[1]}: {count} rows for one codec x utterance")
        if key not in wanted:
            problems.append(f"{key[0]} {key[1]}: row is not in the run's plan")
    for key in wanted:
        if key not in seen:
            problems.append(f"{key[0]} {key[1]}: planned row is missing")
    if record.plan.references is None or record.plan.user_pins is None:
        problems.append(f"{files.run_json}: run.json version {record.version} predates plans that pin each "
                        f"reference, transcript and user checkpoint; its rows cannot be tied to what they were "
                        f"computed from (rerun it into a new directory to audit it)")
    return problems


def _summary_problems(run: Run) -> list[str]:
    """summary.json against the summary recomputed from the rows (in the version it was written in), and
    its ledger against the one derived again from the payload files."""
    if run.summary is None:
        return [f"{run.dir.summary}: missing"]
    version = run.summary.get("version")
    recomputed = json.loads(json.dumps(summarize(run.rows, version if version in SUMMARY_VERSIONS else SUMMARY_VERSION)))
    # The ledger is derived from the payload files, not from the rows alone: checked on its own.
    problems = json_differences("summary", {k: v for k, v in run.summary.items() if k != "ledger"}, recomputed,
                                "summary.json", "the rows")
    try:
        problems += ledger_problems(run.summary, run.rows, run.dir)
    except Exception as exc:  # a ledger the checks cannot derive fails the audit, never crashes it
        problems.append(f"{run.dir.summary}: the audit could not derive the ledger ({type(exc).__name__}: {exc})")
    return problems
