"""Re-derive a run from its files: every aggregate, size, hash, length and guard record.

The auditor trusts nothing the run wrote about itself that it can recompute: payload sizes and
representation bits come from parsing the payload files, audio facts from reading the wavs, and
the summary from the verified rows.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from codecarena.pcm16 import to_int16
from codecarena.files import json_differences, sha256_file
from codecarena.metrics import outputs
from codecarena.metrics.reference_results import (Entry, ReferenceResultError, entries, parse_entry, reliances,
                                                   value_sha256)
from codecarena.registry import user_units
from codecarena.registry.entries import RegistryError, load_entry
from codecarena.payload import PayloadError, read_payload
from codecarena.rundir import RunDir, StageFiles, UnsafePathError
from codecarena.specs import bare_canonical, parse_configuration
from codecarena.runtime.venvs import sync_interpreter
from codecarena.runtime.limits import StageLimits, default_memory_limit
from codecarena.runtime.protocol import Job
from codecarena.runtime.stages import run_stage
from codecarena.sandbox import for_family
from codecarena.results.listening.audit import listening_problems
from codecarena.results.channel_audit import channel_problems, decoder_input
from codecarena.results.condition_audit import condition_problems, conditioned_input, hop_replay_problems
from codecarena.results.ledger import ledger_problems
from codecarena.results.record import Plan, PlanUserCodec, RunLoadError, RunRecord
from codecarena.results.rescore import Sample, rescore_problems
from codecarena.results.run import Run
from codecarena.results.schema import Row
from codecarena.results.summary import SUMMARY_VERSION, SUMMARY_VERSIONS, summarize
from codecarena.results.verdict import checks_failure, status_problem

# How long after its deadline a timed-out stage may still report: the kill, the exit and the reaping.
TIMEOUT_SLACK_S = 2.0


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def _audit_stages(row: Row, where: str) -> list[str]:
    problems = []
    # A failed row may have none: its executor process died before a stage ran (the error says so).
    if not row.stages and row.status == "ok":
        problems.append(f"{where}: no stage records")
    limits = row.limits
    for stage in row.stages:
        g = stage.guard
        if g.limit_bytes <= 0 or g.poll_s <= 0 or g.polls < 1:
            problems.append(f"{where}: {stage.name} has no usable memory-guard record")
        if limits is not None:
            if (g.limit_bytes, g.poll_s) != (limits.memory_limit_bytes, limits.guard_poll_s):
                problems.append(f"{where}: {stage.name} ran under guard limit {g.limit_bytes} B / poll {g.poll_s} s, "
                                f"the row's limits say {limits.memory_limit_bytes} B / {limits.guard_poll_s} s")
            deadline = limits.stage_timeout_s
            if stage.wall_s > deadline + TIMEOUT_SLACK_S and not g.timed_out:
                problems.append(f"{where}: {stage.name} ran {stage.wall_s:.1f} s, past its {deadline:g} s stage "
                                f"timeout, without being killed")
            if g.timed_out and stage.wall_s < deadline:
                problems.append(f"{where}: {stage.name} is marked timed out after {stage.wall_s:.1f} s, before "
                                f"its {deadline:g} s stage timeout")
        if stage.peak_rss_bytes > g.limit_bytes and not g.fired:
            problems.append(f"{where}: {stage.name} peak RSS {stage.peak_rss_bytes} is over its limit "
                            f"{g.limit_bytes} but the guard did not fire")
        if (g.fired or g.timed_out) and stage.ok:
            problems.append(f"{where}: {stage.name} is marked ok although the guard killed it")
    return problems


def _in_run(run: RunDir, relative: str, what: str, where: str, problems: list[str]) -> Path | None:
    try:
        return run.resolve(relative)
    except UnsafePathError as exc:
        problems.append(f"{where}: {what} path: {exc}")
        return None


def _audit_ok_row(row: Row, run: RunDir, where: str) -> list[str]:
    problems: list[str] = []
    if row.payload is None or row.decoded is None:
        return [f"{where}: status ok but payload or decoded file is not named"]
    payload_path = _in_run(run, row.payload, "payload", where, problems)
    decoded_path = _in_run(run, row.decoded, "decoded", where, problems)
    reference = _in_run(run, row.reference, "reference", where, problems)
    if payload_path is None or decoded_path is None or reference is None:
        return problems
    if not payload_path.is_file():
        problems.append(f"{where}: payload file {row.payload} is missing")
    else:
        size = payload_path.stat().st_size
        if size != row.payload_bytes:
            problems.append(f"{where}: payload {row.payload} is {size} bytes, row says {row.payload_bytes}")
        if sha256_file(payload_path) != row.payload_sha256:
            problems.append(f"{where}: payload {row.payload} sha256 differs from the row")
        try:
            payload = read_payload(payload_path)
        except PayloadError as exc:
            problems.append(f"{where}: {exc}")
        else:
            bits = payload.representation_bits()
            if dict(payload.checkpoint) != row.checkpoint:
                problems.append(f"{where}: payload's checkpoint identity differs from the row's")
            if payload.variant != row.variant:
                problems.append(f"{where}: payload was encoded with variant {payload.variant or 'none'!r}, "
                                f"row says {row.variant or 'none'!r}")
            if bits != row.representation_bits:
                problems.append(f"{where}: payload holds {bits} representation bits, row says {row.representation_bits}")
            if payload.codec != bare_canonical(row.codec) or payload.num_samples != row.num_samples or \
                    payload.sample_rate != row.sample_rate:
                problems.append(f"{where}: payload is {payload.codec} {payload.num_samples} samples at "
                                f"{payload.sample_rate} Hz, row says {row.codec} {row.num_samples} at {row.sample_rate}")
            seconds = row.num_samples / row.sample_rate
            if not _close(row.duration_s, seconds):
                problems.append(f"{where}: duration_s {row.duration_s} != num_samples / sample_rate {seconds}")
            if not _close(row.representation_bps, bits / seconds):
                problems.append(f"{where}: representation_bps {row.representation_bps} != {bits / seconds}")
            if not _close(row.payload_bps, size * 8 / seconds):
                problems.append(f"{where}: payload_bps {row.payload_bps} != {size * 8 / seconds}")
    if not decoded_path.is_file():
        problems.append(f"{where}: decoded file {row.decoded} is missing")
    else:
        if sha256_file(decoded_path) != row.decoded_sha256:
            problems.append(f"{where}: decoded {row.decoded} sha256 differs from the row")
        try:
            pcm, rate = sf.read(decoded_path, dtype="int16")
        except (sf.LibsndfileError, RuntimeError) as exc:
            problems.append(f"{where}: decoded {row.decoded} is unreadable ({exc})")
        else:
            if len(pcm) != row.num_samples or rate != row.sample_rate or len(pcm) != row.decoded_samples:
                problems.append(f"{where}: decoded {row.decoded} has {len(pcm)} samples at {rate} Hz, "
                                f"row says {row.num_samples} at {row.sample_rate}")
            clipped = int(np.count_nonzero((pcm == 32767) | (pcm == -32768)))
            if clipped != row.clipped_samples:
                problems.append(f"{where}: decoded has {clipped} full-scale samples, row says {row.clipped_samples}")
    if row.replay_sampled and \
            row.replay_identical != (row.replay_sha256 is not None and row.replay_sha256 == row.decoded_sha256):
        problems.append(f"{where}: replay_identical disagrees with the replay and decoded hashes")
    expected_checks = not checks_failure(row.finite, row.silent)
    if row.checks_passed != expected_checks:
        problems.append(f"{where}: checks_passed is {row.checks_passed}, the checks give {expected_checks}")
    if not reference.is_file():
        problems.append(f"{where}: reference file {row.reference} is missing")
    elif sha256_file(reference) != row.reference_sha256:
        problems.append(f"{where}: reference {row.reference} sha256 differs from the row")
    elif row.family == "pcm" and decoded_path.is_file():
        given = conditioned_input(row, run)
        problems += _pcm_problems(given if given is not None else reference, decoded_path, where)
    return problems


def _pcm_problems(reference: Path, decoded: Path, where: str) -> list[str]:
    """The lossless control decodes to what its encoder got (its reference, or its conditioned input)
    quantised to 16 bits, sample for sample (the quantiser its encoder uses): anything else is not PCM,
    whatever its hashes say."""
    try:
        original, _ = sf.read(reference, dtype="float64")
        pcm, _ = sf.read(decoded, dtype="int16")
    except (sf.LibsndfileError, RuntimeError) as exc:
        return [f"{where}: cannot compare the PCM control with its reference ({exc})"]
    if original.shape != pcm.shape or not np.array_equal(to_int16(original), pcm):
        return [f"{where}: the PCM control's decoded audio is not its reference quantised to 16 bits"]
    return []


def _registry_pin_problems(row: Row, where: str) -> list[str]:
    """A row that says real weights must carry its registry entry's pinned checkpoint identity for its
    configuration: any other checkpoint (a user's, an edited pin) presented as the registry's is refused."""
    try:
        entry = load_entry(row.registry)
    except RegistryError as exc:
        return [f"{where}: its registry entry cannot be read ({exc})"]
    if entry.checkpoint is None:
        return []
    pinned = entry.checkpoint.for_config(parse_configuration(row.codec).config).identity(entry.id)
    if row.checkpoint != pinned:
        return [f"{where}: row says weights 'real' (the registry's pin) but its checkpoint {row.checkpoint} is not "
                f"the registry's pin for {row.codec} {pinned}"]
    return []


def _audit_row(row: Row, run: RunDir, where: str) -> list[str]:
    problems = _audit_stages(row, where)
    # Synthetic weights must never pass for real ones: the payload's identity decides.
    synthetic = row.checkpoint.get("weights") == "synthetic"
    if synthetic != (row.weights == "synthetic"):
        problems.append(f"{where}: row says weights {row.weights!r} but its payload's checkpoint says "
                        f"{row.checkpoint.get('weights', 'real or none')!r}")
    if row.weights == "real" and not row.registry.startswith(user_units.REGISTRY_PREFIX):
        problems += _registry_pin_problems(row, where)
    if (row.weights == "user") != (row.checkpoint.get("pinned_by") == "user"):
        problems.append(f"{where}: row says weights {row.weights!r} but its payload's checkpoint says "
                        f"{'pinned by user' if row.checkpoint.get('pinned_by') == 'user' else 'not pinned by user'}")
    problems += error_count_problems(row, where)
    problems += channel_problems(row, run, where)
    problems += _status_problems(row, run, where)
    if row.status == "ok":
        problems += _audit_ok_row(row, run, where)
    else:
        if not row.error:
            problems.append(f"{where}: failed row without a reason")
        for what in ("reference", "payload", "decoded"):
            if getattr(row, what) is not None:
                _in_run(run, getattr(row, what), what, where, problems)
    return problems


def _status_problems(row: Row, run: RunDir, where: str) -> list[str]:
    """The row's status must be the one its verdict gives. The one failure a row's fields cannot show,
    decoded audio written at another rate than the arena's, is read from the decoded file."""
    problem = status_problem(row)
    if problem and row.status == "failed" and row.decoded is not None:
        decoded = _in_run(run, row.decoded, "decoded", where, [])
        if decoded is not None and decoded.is_file() and sf.info(decoded).samplerate != row.sample_rate:
            return []
    return [f"{where}: {problem}"] if problem else []


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


def error_count_problems(row: Row, where: str) -> list[str]:
    """An error rate that records its counts (details `errors`, `reference_tokens`) must be their
    ratio: the summary's corpus rates add the counts, the means the values."""
    problems = []
    for name, record in row.metrics.items():
        details = record["details"] if isinstance(record.get("details"), dict) else {}
        if record["status"] not in ("ok", "suspect") or not {"errors", "reference_tokens"} & details.keys():
            continue
        counts = outputs.error_counts(record)
        if counts is None or record["value"] != counts[0] / counts[1]:
            problems.append(f"{where}: {name} is {record['value']!r}, but its counts say {details.get('errors')!r} "
                            f"errors in {details.get('reference_tokens')!r} reference tokens")
    return problems


def _digest_problem(row: Row) -> str:
    if row.row_sha256 is None:
        return f"row version {row.version} carries no row_sha256, so its values cannot be checked"
    return "the row's content does not hash to its row_sha256 (edited after it was computed?)"


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
            notes.append(f"replay on {device} of {len(identical)} payload(s) made on {made}: {sum(identical)} decoded "
                         f"byte-identical to the run's audio, {len(identical) - sum(identical)} differ (a cross-device "
                         "comparison: another device is another configuration, so a difference is not a failure)")
    return problems


def user_codec_problems(pinned: list[PlanUserCodec]) -> list[str]:
    """A user codec whose source, as it is now on this machine, is not the one the run pinned: its
    payloads can no longer be replayed by the code that made them, and the run should say so."""
    problems = []
    for codec in pinned:
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
            problems += _audit_row(row, run.dir, where)
            problems += condition_problems(row, run.dir, record.plan, references, where)
            problems += [f"{where}: {problem}" for problem in record.plan.row_problems(row)]
            if record.plan.references is not None and not row.intact:
                problems.append(f"{where}: {_digest_problem(row)}")
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
