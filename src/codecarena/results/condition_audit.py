"""What the audit re-derives of a row whose input went through a condition (docs/conditions.md): the
conditioned input, its trace and every hop's files are the ones the row names with their sha256; a noise,
reverberation or level condition's input is made again from the run's own files (the clean reference, the
other utterances' references a babble took, the run's copies of a set's files, all checked against the
plan's pins) and must be the same bytes with the same trace; a tandem's or generation's hops are the
codecs the condition names, each payload parsed again for its bits and rates, the last hop's decoded
audio the conditioned input; a generation's agreement is counted again from its payloads; and the row's
record says what its trace says. `audit --replay` also decodes every hop's payload again in a fresh
worker (`hop_replay_problems`)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from codecarena.arena import ARENA_RATE
from codecarena.conditions import record as condition_record
from codecarena.conditions.agreement import agreement
from codecarena.conditions.make import ConditionInputError, Sources, hop_trace, make, realised, wav_bytes
from codecarena.conditions.noise import BabbleError, Source
from codecarena.conditions.p56 import LevelError
from codecarena.conditions.reverb import RoomError
from codecarena.conditions.sets import SetError
from codecarena.conditions.spec import ConditionError
from codecarena.files import JSONFileError, json_differences, read_json, sha256_file
from codecarena.metrics.declarations import BY_NAME, against_input
from codecarena.payload import PayloadError, read_payload
from codecarena.plural import counted
from codecarena.registry.catalog import FAMILIES
from codecarena.results.record import Plan
from codecarena.results.schema import Row
from codecarena.rundir import RunDir, StageFiles, UnsafePathError
from codecarena.runtime.limits import StageLimits, default_memory_limit
from codecarena.runtime.protocol import Job
from codecarena.runtime.stages import run_stage
from codecarena.sandbox import for_family
from codecarena.specs import SpecError, parse_configuration

_FAILURES = (ConditionInputError, ConditionError, SetError, BabbleError, RoomError, LevelError, PayloadError,
             UnsafePathError, SpecError, JSONFileError, OSError, ValueError, KeyError, TypeError)


def conditioned_input(row: Row, run: RunDir) -> Path | None:
    """The file a conditioned row's encoder got (None for a row without a condition)."""
    return run.resolve(row.condition["input"]) if row.condition else None


def _sources(plan: Plan, run: RunDir, references: dict[str, str]) -> Sources:
    """What a condition draws from, as the audit finds it: the run's copies, each checked against the plan."""
    pinned = {ref.id: ref for ref in plan.references or ()}

    def reference(utterance: str) -> tuple[Path, str, str]:
        if utterance not in references or utterance not in pinned:
            raise ConditionInputError(f"utterance {utterance} has no reference in the run")
        path = run.resolve(references[utterance])
        if sha256_file(path) != pinned[utterance].sha256:
            raise ConditionInputError(f"{references[utterance]}: sha256 is not the one the plan pins")
        return path, references[utterance], pinned[utterance].sha256

    return Sources(tuple(Source(ref.id, ref.speaker) for ref in plan.references or ()), reference,
                   tuple(found.as_set() for found in plan.file_sets or ()), run.set_file)


def condition_problems(row: Row, run: RunDir, plan: Plan, references: dict[str, str], where: str) -> list[str]:
    """Every way the row's condition does not re-derive (module docstring); `references`: utterance -> the
    run-relative reference its rows name."""
    # The row's configuration is canonical, its condition the text between `%` and `@` (read without parsing
    # the codec spec: a user codec's family is not the registry's).
    configured = row.codec.partition("@")[0].partition("%")[2]
    record = row.condition
    if record is None:
        return [f"{where}: its configuration names condition {configured} but the row records none"] if configured \
            else ([f"{where}: input_metrics without a condition"] if row.input_metrics is not None else [])
    if not configured:
        return [f"{where}: the row records condition {record.get('condition')!r} but its configuration has none"]
    if sorted(record) != sorted(condition_record.RECORD_KEYS):
        return [f"{where}: its condition record does not have the keys {', '.join(condition_record.RECORD_KEYS)}"]
    if record["condition"] != configured:
        return [f"{where}: its condition record is of {record['condition']!r}, its configuration's is {configured!r}"]
    problems = _input_metric_problems(row, plan, where)
    if row.status != "ok":
        return problems
    for rel, digest in condition_record.named_files(record):
        try:
            path = run.resolve(rel)
        except (UnsafePathError, TypeError) as exc:
            return [*problems, f"{where}: condition file path: {exc}"]
        if not path.is_file():
            problems.append(f"{where}: condition file {rel} is missing")
        elif sha256_file(path) != digest:
            problems.append(f"{where}: condition file {rel} sha256 differs from the row")
    if problems:
        return problems
    try:
        return _rederived(row, run, plan, references, where)
    except _FAILURES as exc:
        return [f"{where}: the condition does not re-derive: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"]


def _input_metric_problems(row: Row, plan: Plan, where: str) -> list[str]:
    wanted = [o for name in against_input(tuple(plan.metrics)) for o in BY_NAME[name].outputs]
    if not plan.metrics:
        return [] if row.input_metrics is None else [f"{where}: input_metrics, but the run selected no metric"]
    got = sorted(row.input_metrics or {})
    if got != sorted(wanted):
        return [f"{where}: input_metrics holds {got}, the run's metrics against the input are {sorted(wanted)}"]
    return []


def _rederived(row: Row, run: RunDir, plan: Plan, references: dict[str, str], where: str) -> list[str]:
    record = row.condition
    assert record is not None
    condition = parse_configuration(row.codec).conditioned
    assert condition is not None
    trace_path, input_path = run.resolve(record["trace"]), run.resolve(record["input"])
    stored = read_json(trace_path)
    reference = run.resolve(row.reference)
    problems: list[str] = []
    if condition.signal:
        speaker = next((r.speaker for r in plan.references or () if r.id == row.utterance), row.speaker)
        samples, derived = make(condition, row.utterance, speaker, reference, row.reference,
                                _sources(plan, run, references))
        if wav_bytes(samples) != input_path.read_bytes():
            problems.append(f"{where}: the conditioned input made again from the run's files is not "
                            f"{record['input']} (its bytes differ)")
    else:
        problems += _hop_problems(row, run, where)
        derived = hop_trace(condition, row.utterance, reference, row.reference, input_path, record["hops"])
    problems += [f"{where}: trace {line}" for line in
                 json_differences(record["trace"], stored, derived, "the trace", "the files")]
    said = {"speech_level_dbov": derived["speech_level_dbov"], "input_level_dbov": derived["input_level_dbov"],
            "clipped_samples": derived["clipped_samples"], "realised": realised(derived),
            "input_sha256": derived["input_sha256"], "parameters": derived["parameters"],
            "model": derived["model"], "seed": derived["seed"], "hops": derived.get("hops", [])}
    problems += [f"{where}: condition {line}" for line in
                 json_differences("record", {k: record[k] for k in said}, said, "the row", "its trace")]
    if condition.model == "gen":
        counted = agreement(read_payload(run.resolve(record["hops"][-1]["payload"])),
                            read_payload(run.resolve(row.payload or "")))
        if record["agreement"] != counted:
            problems.append(f"{where}: condition agreement says {record['agreement']}, its payloads give {counted}")
    elif record["agreement"] is not None:
        problems.append(f"{where}: an agreement is counted only for a generation")
    return problems


def _hop_problems(row: Row, run: RunDir, where: str) -> list[str]:
    """Each hop is the codec the condition names, its payload holds the bits and rates the row records,
    and the last one decoded into the conditioned input."""
    record = row.condition
    assert record is not None
    expected = parse_configuration(row.codec).hops()
    hops = record["hops"]
    if len(hops) != len(expected):
        return [f"{where}: {counted(len(hops), 'hop')} recorded, the condition has {len(expected)}"]
    problems: list[str] = []
    seconds = row.num_samples / ARENA_RATE
    for k, (hop, spec) in enumerate(zip(hops, expected), 1):
        if not isinstance(hop, dict) or sorted(hop) != sorted(condition_record.HOP_KEYS):
            problems.append(f"{where}: hop {k} does not have the keys {', '.join(condition_record.HOP_KEYS)}")
            continue
        payload_path = run.resolve(hop["payload"])
        payload = read_payload(payload_path)
        bits, size = payload.representation_bits(), payload_path.stat().st_size
        if (hop["codec"], payload.codec, payload.num_samples) != (spec.canonical, spec.canonical, row.num_samples):
            problems.append(f"{where}: hop {k} is {hop['codec']} / payload {payload.codec} of {payload.num_samples} "
                            f"samples; the condition's hop {k} is {spec.canonical} of {row.num_samples}")
        for key, value in (("representation_bits", bits), ("payload_bytes", size),
                           ("representation_bps", bits / seconds), ("payload_bps", size * 8 / seconds)):
            if not math.isclose(float(hop[key]), float(value), rel_tol=1e-12, abs_tol=1e-12):
                problems.append(f"{where}: hop {k} {key} is {hop[key]}, its payload gives {value}")
    if hops and hops[-1]["decoded"] != record["input"]:
        problems.append(f"{where}: the last hop decoded {hops[-1]['decoded']}, not the conditioned input")
    return problems


def hop_replay_problems(rows: list[Row], run: RunDir, python: str, interpreters: dict[str, str]) -> list[str]:
    """Every hop's payload decoded again in a fresh worker of its family's runtime (`interpreters`: family ->
    interpreter), on the device it ran on, and compared with the hop's decoded audio."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            if row.status != "ok" or not row.condition or not row.condition.get("hops"):
                continue
            for k, hop in enumerate(row.condition["hops"], 1):
                where = f"{row.codec} {row.utterance} hop {k}"
                try:
                    payload, family = run.resolve(hop["payload"]), parse_configuration(hop["codec"]).family
                except (UnsafePathError, SpecError, KeyError, TypeError) as exc:
                    problems.append(f"{where}: {exc}")
                    continue
                out = Path(tmp) / "hop.wav"
                files = StageFiles.scratch(Path(tmp), "audit-hop-replay")
                device = hop["device"] if FAMILIES[family].torch else "cpu"
                stage, _ = run_stage("audit-hop-replay", Job.decode(payload, out, files.report, device=device),
                                     row.limits or StageLimits(default_memory_limit()), files,
                                     interpreters.get(family, python), sandbox=for_family(family))
                if not stage.ok:
                    problems.append(f"{where}: fresh decode for audit failed: {stage.error}")
                elif sha256_file(out) != hop["decoded_sha256"]:
                    problems.append(f"{where}: a fresh decode of {hop['payload']} differs from {hop['decoded']}")
    return problems
