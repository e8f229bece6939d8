"""What the audit re-derives of one row from the run's files: its stage records (guard, timeout,
lengths), its payload (parsed again for sizes and representation bits), its decoded audio and
reference (read again for rates, lengths and hashes), the PCM control sample for sample, its weights
against the payload's checkpoint and the registry's pin, error counts, the channel, and that its
status is the one its verdict gives (`results/verdict.py`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import soundfile as sf

from codecarena.pcm16 import to_int16
from codecarena.files import sha256_file
from codecarena.metrics import outputs
from codecarena.registry import user_units
from codecarena.registry.entries import RegistryError, load_entry
from codecarena.payload import PayloadError, read_payload
from codecarena.plural import counted
from codecarena.rundir import RunDir, UnsafePathError
from codecarena.specs import bare_canonical, parse_configuration
from codecarena.results.channel_audit import channel_problems
from codecarena.results.condition_audit import conditioned_input
from codecarena.results.schema import Row
from codecarena.results.verdict import checks_failure, status_problem

# How long after its deadline a timed-out stage may still report: the kill, the exit and the reaping.
TIMEOUT_SLACK_S = 2.0


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def audit_stages(row: Row, where: str) -> list[str]:
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
                problems.append(f"{where}: payload is {payload.codec} {counted(payload.num_samples, 'sample')} at "
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


def row_problems(row: Row, run: RunDir, where: str) -> list[str]:
    problems = audit_stages(row, where)
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
            problems.append(f"{where}: {name} is {record['value']!r}, but its counts say otherwise (errors "
                            f"{details.get('errors')!r}, reference_tokens {details.get('reference_tokens')!r})")
    return problems


def digest_problem(row: Row) -> str:
    if row.row_sha256 is None:
        return f"row version {row.version} carries no row_sha256, so its values cannot be checked"
    return "the row's content does not hash to its row_sha256 (edited after it was computed?)"
