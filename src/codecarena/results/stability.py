"""Token stability: two extra encodes per row, in the codec's own runtime, whose payloads the ledger
compares with the row's (`results/ledger.py`, docs/ledger.md).

- re-encode: the row's decoded audio encoded again with the same configuration, weights and variant;
- shift: the row's reference delayed by `shift_ms` of silence, encoded.

Each is an encode job of a persistent worker of the family's runtime (one per runtime, and one per
configuration of a user codec, its model loaded once, as `codecarena run --mode warm` runs rows), under
the memory guard and stage timeout of the run's rows, through the same worker protocol as the run's
own encodes, on the device each row was made on (refused before anything is written on a machine
without it). What a row's measurement gave is written to
`stability/<codec>/<utterance>.json` with the sha256 of the row's payload, decoded audio and reference
it was measured on and of each extra payload, so that the audit can derive the numbers again and a
row computed again later is not paired with an old measurement. Rows already measured on their
current files with the same shift are kept.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from codecarena.arena import ARENA_RATE
from codecarena.files import sha256_file, write_json
from codecarena.payload import PayloadError, read_payload
from codecarena.results import ledger
from codecarena.results.stability_record import StabilityRecord, StabilityRecordError, parse_stability, stability_paths
from codecarena.results.token_layout import layout_of
from codecarena.results.record import RunLoadError
from codecarena.results.run import Run
from codecarena.results.schema import Row
from codecarena.rundir import RunDir, RunLockError, UnsafePathError
from codecarena.runtime.limits import StageLimits, default_memory_limit
from codecarena.runtime.persistent import WorkerSet
from codecarena.runtime.protocol import Job
from codecarena.runtime.stages import run_stage_warm
from codecarena.runtime.venvs import sync_interpreter
from codecarena.specs import SpecError, parse_configuration
from codecarena.choices import STABILITY_SHIFT_MS

DEFAULT_SHIFT_MS = STABILITY_SHIFT_MS
MAX_SHIFT_MS = 1000.0


class StabilityError(ValueError):
    """A run whose stability cannot be measured as asked (one line)."""


def shift_samples(shift_ms: float) -> int:
    if not 0 < shift_ms <= MAX_SHIFT_MS:
        raise StabilityError(f"--shift-ms {shift_ms:g}: expected more than 0 and at most {MAX_SHIFT_MS:g} ms")
    samples = round(shift_ms * ARENA_RATE / 1000)
    if samples < 1:
        raise StabilityError(f"--shift-ms {shift_ms:g}: less than one sample at {ARENA_RATE} Hz")
    return samples


def _has_tokens(row: Row, run: RunDir) -> bool:
    payload = read_payload(run.resolve(row.payload or ""))
    return any(spec.tokens for spec in layout_of(payload))


def _current(row: Row, paths: dict[str, Path], samples: int) -> bool:
    """Whether the row already has a complete measurement on its current files with this shift."""
    try:
        record = parse_stability(paths["record"])
    except StabilityRecordError:
        return False
    if not record.measures(row) or record.shift_samples != samples:
        return False
    return all(sha and not error and paths[part].is_file() and sha256_file(paths[part]) == sha
               for part, sha, error in record.parts)


def _shifted_input(reference: Path, out: Path, samples: int) -> None:
    """The reference delayed by `samples` zeros, as 16-bit PCM (the reference's own samples, unchanged)."""
    pcm, rate = sf.read(reference, dtype="int16")
    sf.write(out, np.concatenate([np.zeros(samples, dtype=np.int16), pcm]), rate, subtype="PCM_16", format="WAV")


def _encode(name: str, source: Path, target: Path, row: Row, run: RunDir, worker: Any,
            weights: str) -> tuple[str, str]:
    """One extra encode: (payload sha256, "") or ("", why it failed)."""
    spec = parse_configuration(row.codec)
    files = run.stage(spec.slug, row.utterance, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    job = Job.encode(source, target, files.report, spec.bare.canonical, weights=weights, variant=row.variant,
                     device=row.ran_on)
    stage, _ = run_stage_warm(name, job, files, worker)
    if not stage.ok:
        return "", stage.error
    return sha256_file(target), ""


def measure_row(row: Row, run: RunDir, samples: int, worker: Any, weights: str) -> StabilityRecord:
    paths = stability_paths(run, row)
    slug = parse_configuration(row.codec).slug
    run.work(slug, row.utterance).mkdir(parents=True, exist_ok=True)
    shifted = run.shifted_input(slug, row.utterance)
    parts = [("reencode", *_encode("stability-reencode", run.resolve(row.decoded or ""), paths["reencode"], row, run,
                                   worker, weights))]
    try:
        # A row whose input went through a condition shifts the input its encoder got.
        _shifted_input(run.resolve(row.condition["input"] if row.condition else row.reference), shifted, samples)
        parts.append(("shift", *_encode("stability-shift", shifted, paths["shift"], row, run, worker, weights)))
    finally:
        shifted.unlink(missing_ok=True)
    record = StabilityRecord(row.codec, row.utterance, row.payload_sha256 or "", row.decoded_sha256 or "",
                                    row.reference_sha256, samples, tuple(parts))
    write_json(paths["record"], record.to_dict())
    return record


def measure(run_dir: Path, shift_ms: float = DEFAULT_SHIFT_MS, codecs: tuple[str, ...] = (),
            on_row: Callable[[Row, str], None] | None = None) -> tuple[Run, list[str]]:
    """Measure every ok row of a token codec (or of the `codecs` named) that has no current measurement,
    then write the run's ledger into summary.json again; returns the run as it now is on disk (loaded
    under its lock) and one line per stage that failed."""
    samples = shift_samples(shift_ms)
    run = RunDir(run_dir)
    try:
        with run.locked():
            return _measure_locked(run, samples, codecs, on_row)
    except (RunLockError, UnsafePathError, RunLoadError) as exc:
        raise StabilityError(str(exc)) from None


def _measure_locked(run: RunDir, samples: int, codecs: tuple[str, ...],
                    on_row: Callable[[Row, str], None] | None) -> tuple[Run, list[str]]:
    loaded = Run.open(run)
    if not loaded.record.finished:
        raise StabilityError(f"{run.run_json}: the run did not finish (rerun it to resume first)")
    known = {r.codec for r in loaded.rows}
    for codec in codecs:
        if codec not in known:
            raise StabilityError(f"--codec {codec}: not a codec configuration of this run ({', '.join(sorted(known))})")
    interpreters = {family: python for family, _, python, *_ in loaded.record.plan.runtimes}
    _probe_devices(loaded.rows, codecs, interpreters, run)
    for python in set(interpreters.values()):
        sync_interpreter(python)
    limits = next((r.limits for r in loaded.rows if r.limits is not None), None) or StageLimits(default_memory_limit())
    workers = WorkerSet(limits.memory_limit_bytes, run.worker, limits.guard_poll_s, limits.stage_timeout_s)
    try:
        failures = _measure_rows(loaded.rows, run, samples, codecs, on_row, interpreters, workers,
                                 loaded.record.plan.weights)
    finally:
        workers.stop()
    if loaded.summary is not None:
        summary = {**loaded.summary, "ledger": ledger.build(loaded.rows, run)}
        write_json(run.summary, summary)
        loaded = dataclasses.replace(loaded, summary=summary)
    return loaded, failures


def _probe_devices(rows: list[Row], codecs: tuple[str, ...], interpreters: dict[str, str], run: RunDir) -> None:
    """The extra encodes run on the device each row was made on: they are compared with the row's own
    payload, so an encode on another device would measure the device, not the codec. A device this
    machine cannot give refuses the measurement (StabilityError) before anything is written."""
    from codecarena.devices import DeviceError, probe

    asked = {(interpreters.get(row.family, sys.executable), row.ran_on) for row in rows
             if row.status == "ok" and row.ran_on != "cpu" and (not codecs or row.codec in codecs)}
    for python, device in sorted(asked):
        try:
            probe(python, device)
        except DeviceError as exc:
            raise StabilityError(f"ledger --stability: the rows of {run.root} were made on {device} and their "
                                 f"stability encodes need it: {exc}; stability compares new encodes with the rows' "
                                 "own payloads, so it is measured on the run's device only") from None


def _measure_rows(rows: list[Row], run: RunDir, samples: int, codecs: tuple[str, ...],
                  on_row: Callable[[Row, str], None] | None, interpreters: dict[str, str], workers: WorkerSet,
                  weights: str) -> list[str]:
    failures: list[str] = []
    for row in rows:
        if row.status != "ok" or (codecs and row.codec not in codecs):
            continue
        try:
            if not _has_tokens(row, run):
                continue
            paths = stability_paths(run, row)
        except (PayloadError, SpecError, UnsafePathError) as exc:
            failures.append(f"{row.codec} {row.utterance}: {exc}")
            continue
        if _current(row, paths, samples):
            if on_row:
                on_row(row, "kept")
            continue
        # A user codec's configuration gets a sandboxed worker of its own, as in a warm run.
        worker = workers.get(interpreters.get(row.family, sys.executable), parse_configuration(row.codec).bare)
        record = measure_row(row, run, samples, worker, weights)
        failures += [f"{row.codec} {row.utterance}: {part}: {error}" for part, _, error in record.parts if error]
        if on_row:
            on_row(row, "measured")
    return failures
