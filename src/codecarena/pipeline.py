"""The row pipeline: one codec configuration x one utterance, each stage in a guarded worker process.

encode (reference -> payload file) -> decode (payload only -> wav) -> replay (decode again in
another fresh process; sha256 must match) -> checks -> accounting -> row appended to rows.jsonl.
In cold mode every stage is a fresh process; in warm mode encode and decode go to a persistent
worker that keeps the model loaded, while a sample of rows still runs cold (to measure cold start)
and a sample is replayed in a fresh process. Which executor runs the rows (in this process, a
local process pool, Ray) does not change them. Runs resume: a row that is complete and whose
files still verify is not computed again.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import soundfile as sf

from codecarena import variants
from codecarena.arena import ARENA_RATE
from codecarena.channel import stage as channel_stage
from codecarena.channel.spec import ChannelError
from codecarena.registry import user_pins, user_units
from codecarena.registry.catalog import FAMILIES
from codecarena.datasets import EvalSet, Utterance
from codecarena.diskspace import DiskFullError, free_bytes, row_bytes
from codecarena.files import sha256_file, write_json
from codecarena.metrics.guarded import THREAD_SETTINGS
from codecarena.metrics.reference_results import missing, reliances
from codecarena.metrics.scorer import RowScorer, Scorer, UtteranceInfo
from codecarena.payload import PayloadError, read_payload
from codecarena.references import Reference, ReferenceCopyError, planned_reference_sha256, prepare_reference
from codecarena.results import ledger, store
from codecarena.results.record import (RUN_VERSION, Plan, RunLoadError, RunRecord, on_the_cpu_if_older, plan_from_dict,
                                       read_record)
from codecarena.results.schema import ROW_VERSION, Row
from codecarena.results.summary import summarize
from codecarena.results.verdict import replay_failure, settle, status_problem
from codecarena.rundir import RunDir, RunLockError, UnsafePathError
from codecarena.runtime.external import ExternalRuntime, mixed_runtimes
from codecarena.runtime.limits import StageLimits
from codecarena.runtime.persistent import WorkerSet
from codecarena.runtime.protocol import Job, StageReport
from codecarena.runtime.stages import Stage, run_stage, run_stage_warm
from codecarena.sandbox import for_family
from codecarena.specs import CodecSpec, parse_configuration

# Below this RMS a decoded utterance counts as silent (the reference never is).
SILENCE_DBFS = -60.0


class RunError(RuntimeError):
    """The run cannot start or continue; the message says why."""


@dataclass(frozen=True)
class RunOptions:
    out: Path
    codecs: tuple[CodecSpec, ...]
    limits: StageLimits  # recorded per row, not part of the plan
    warm_repeats: int = 2
    python: str = sys.executable
    # (codec family, registry id, interpreter of its runtime[, "external": one --runtime-python named]);
    # families absent use `python`.
    runtimes: tuple[tuple[str, ...], ...] = ()
    external: tuple[ExternalRuntime, ...] = ()  # what the rows of each external-runtime family record
    weights: str = "real"  # "real" or "synthetic:SEED"
    metrics: tuple[str, ...] = ()
    asr_models: tuple[tuple[str, str], ...] = ()  # (language, ASR model: a catalogue name or a folder)
    variant: str = ""  # a named numerical variant applied to every codec's model ("" = upstream)
    mode: str = "cold"  # "cold": a fresh process per stage; "warm": persistent workers per codec runtime
    cold_sample: int = 1  # warm mode: the first N rows of each codec configuration still run cold
    replay_sample: int | None = None  # rows per codec configuration replayed in a fresh process; None = all
    device: str = "cpu"  # where torch families run (devices.parse_device); every other family runs on the CPU
    metric_device: str = "cpu"  # where learned metrics run


@dataclass(frozen=True)
class Task:
    """One row to compute: everything an executor needs to hand to a row runner, picklable."""
    spec: CodecSpec
    ref: Reference
    mode: str
    replay: bool


def plan_of(evalset: EvalSet, opts: RunOptions) -> dict[str, Any]:
    """What determines the rows; a rerun into the same directory must have the same plan. Resource
    limits are not in it: they decide whether a stage may finish, not what it computes (rows record them)."""
    return {
        "set": evalset.name,
        "manifest_sha256": evalset.manifest_sha256,
        "utterances": [[u.id, u.sha256] for u in evalset.utterances],
        "codecs": [{"codec": s.canonical, "config": s.config_dict()} for s in opts.codecs],
        "arena_rate": ARENA_RATE,
        "weights": opts.weights,
        "variant": variants.provenance(opts.variant),
        "warm_repeats": opts.warm_repeats,
        "device": opts.device,
        "metric_device": opts.metric_device,
        "mode": opts.mode,
        "cold_sample": opts.cold_sample if opts.mode == "warm" else None,
        "replay_sample": opts.replay_sample,
        "metrics": list(opts.metrics),
        "runtimes": [list(r) for r in opts.runtimes],
        "asr_models": [list(pair) for pair in opts.asr_models],
        "references": [{"id": u.id, "sha256": planned_reference_sha256(u), "language": u.language,
                        "speaker": u.speaker, "transcript": u.transcript, "critical": [list(c) for c in u.critical]}
                       for u in evalset.utterances],
        "user_pins": [{"codec": s.canonical, "checkpoint": user_pin_identity(s, _runtime_of(opts, s.family)[0])}
                      for s in opts.codecs] if opts.weights == "user" else [],
        "user_codecs": [user_units.load(family).identity() for family in dict.fromkeys(s.family for s in opts.codecs)
                        if FAMILIES[family].origin == "user"],
    }


def user_pin_identity(spec: CodecSpec, registry_id: str) -> dict[str, str]:
    """The checkpoint identity the payloads of a configuration record with --weights user: the user's
    pin as it is now (the plan holds it, so a pin changed between invocations is a different plan)."""
    pin = user_pins.find(spec.family, spec.config)
    if pin is None:
        raise RunError(f"{spec.canonical}: --weights user needs a user pin (codecarena registry pin "
                       f"{spec.family}:{spec.config} --file PATH)")
    return pin.identity(registry_id)


def _runtime_of(opts: RunOptions, family: str) -> tuple[str, str]:
    for fam, registry_id, python, *_ in opts.runtimes:
        if fam == family:
            return registry_id, python
    return "", opts.python


def stage_device(opts: RunOptions, family: str) -> str:
    """The device a family's stages run on: the run's for a torch family, the CPU for any other."""
    return opts.device if FAMILIES[family].torch else "cpu"


def row_device(opts: RunOptions, family: str, reports: dict[str, StageReport | None]) -> dict[str, Any]:
    """The row's `device` (docs/results.md): asked, used, whether --device applied to the family, the
    device facts its encode worker reported and each stage's peak device memory."""
    encode = reports.get("encode")
    return {"requested": opts.device, "device": stage_device(opts, family), "applied": FAMILIES[family].torch,
            "info": encode.device if encode is not None else None,
            "peak_device_memory_bytes": {name: report.peak_device_memory_bytes if report is not None else None
                                         for name, report in reports.items()}}


def _device_problem(name: str, report: StageReport | None, device: str) -> str:
    """A stage whose worker says it ran on another device than the row's (the worker reports only what
    it checked, so this catches an old or foreign worker)."""
    if report is None or report.device is None or report.device.get("device") == device:
        return ""
    return f"{name} worker ran on {report.device.get('device')}, the row's device is {device}"


def _score(scorer: RowScorer | None, ref: Reference, decoded_path: Path | None, failure: str) -> dict[str, Any]:
    """The row's metric records. A RowRunner's scorer is a GuardedScorer: the metrics run in its
    scoring process, so none of them can kill this one."""
    if scorer is None:
        return {}
    if failure or decoded_path is None:
        return scorer.failed_all(f"no decoded audio to score: {failure}")
    utt = ref.utterance
    info = UtteranceInfo(utt.id, utt.language, utt.transcript, utt.critical)
    return scorer.score_files(info, ref.path, decoded_path)


def run_row(spec: CodecSpec, ref: Reference, opts: RunOptions, run: RunDir,
            scorer: RowScorer | None = None, mode: str = "cold", replay: bool = True,
            workers: WorkerSet | None = None) -> Row:
    """One row. mode "warm" sends encode and decode to `workers` (one persistent worker per
    runtime); the replay, when this row is in the replay sample, always runs in a fresh process."""
    if mode == "warm" and workers is None:
        raise ValueError("warm mode needs a WorkerSet")
    utt = ref.utterance
    work = run.work(spec.slug, utt.id)
    work.mkdir(parents=True, exist_ok=True)
    payload_path = run.payload(spec.slug, utt.id)
    decoded_path = run.decoded(spec.slug, utt.id)
    replay_path = work / "replay.wav"
    impaired_path, trace_path = channel_stage.paths(run, spec.slug, utt.id)
    blocked = _clear_outputs(run, {"payload": payload_path, "decoded audio": decoded_path, "replay": replay_path,
                                   **({"impaired payload": impaired_path, "channel trace": trace_path}
                                      if spec.channel else {})})
    if blocked:
        return failed_row(Task(spec, ref, mode, replay), opts, blocked)
    duration = ref.num_samples / ARENA_RATE

    repeats = opts.warm_repeats if mode == "cold" else 0
    _, python = _runtime_of(opts, spec.family)
    fresh_decode = FAMILIES[spec.family].fresh_process_decode

    def stage(name: str, stage_job: Job) -> tuple[Stage, StageReport | None]:
        if mode == "warm" and name != "replay" and not (name == "decode" and fresh_decode):
            assert workers is not None
            return run_stage_warm(name, stage_job, work, workers.get(python, spec))
        return run_stage(name, stage_job, opts.limits, work, python, run.job_folder(spec.slug, utt.id, name),
                         for_family(spec.family))  # its private folder; a user codec's sandbox

    stages: list[Stage] = []
    reports: dict[str, StageReport | None] = {}
    device = stage_device(opts, spec.family)
    fields: dict[str, Any] = {}
    checkpoint: dict[str, Any] = {}
    runtime: dict[str, Any] = {}
    error = ""
    codec_facts: dict[str, Any] = {}
    model: dict[str, Any] = {}

    enc_stage, enc_report = stage("encode", Job.encode(ref.path, payload_path, work / "encode.report.json",
                                                       spec.bare.canonical, warm_repeats=repeats, weights=opts.weights,
                                                       variant=opts.variant, device=device))
    stages.append(enc_stage)
    reports["encode"] = enc_report
    error = enc_stage.error or _device_problem("encode", enc_report, device)
    if not error and enc_report is not None:
        model = enc_report.model
        runtime = enc_report.runtime
        codec_facts = dict(enc_report.facts)
        try:
            payload = read_payload(payload_path)
        except PayloadError as exc:
            error = f"encode wrote an unreadable payload: {exc}"
        else:
            if payload.codec != spec.bare.canonical or payload.num_samples != ref.num_samples:
                error = (f"{payload_path}: payload says {payload.codec} / {payload.num_samples} samples, "
                         f"expected {spec.bare.canonical} / {ref.num_samples}")
            checkpoint = dict(payload.checkpoint)
            bits = payload.representation_bits()
            size = payload_path.stat().st_size
            fields.update(
                payload=run.relative(payload_path), payload_bytes=size, payload_sha256=sha256_file(payload_path),
                representation_bits=bits, representation_bps=bits / duration if duration else None,
                payload_bps=size * 8 / duration if duration else None,
            )

    # The decoder gets the payload as the row's channel delivers it (docs/channel.md).
    received, channel = payload_path, None
    if not error and spec.channel:
        try:
            received, channel = channel_stage.cross(spec.channel, spec.family, utt.id, payload_path, run, spec.slug)
        except (ChannelError, PayloadError, OSError, ValueError) as exc:
            error = f"channel {spec.channel}: {exc}"

    if not error:
        dec_stage, dec_report = stage("decode", Job.decode(received, decoded_path, work / "decode.report.json",
                                                           warm_repeats=repeats, device=device))
        stages.append(dec_stage)
        reports["decode"] = dec_report
        error = dec_stage.error or _device_problem("decode", dec_report, device)
        if not error and dec_report is not None:
            facts = dec_report.facts
            codec_facts["decode"] = facts
            info = sf.info(decoded_path)
            rms = facts.get("rms_dbfs")
            fields.update(
                decoded=run.relative(decoded_path), decoded_sha256=sha256_file(decoded_path),
                decoded_samples=info.frames, trimmed_samples=facts["trimmed_samples"],
                padded_samples=facts["padded_samples"], length_tolerance=facts["length_tolerance"],
                finite=True, silent=rms is None or rms < SILENCE_DBFS,
                clipped_samples=facts["clipped_samples"],
            )
            off = facts["trimmed_samples"] + facts["padded_samples"]
            if info.frames != ref.num_samples or info.samplerate != ARENA_RATE:
                error = (f"{decoded_path}: {info.frames} samples at {info.samplerate} Hz, "
                         f"expected {ref.num_samples} at {ARENA_RATE} Hz")
            elif off > facts["length_tolerance"]:
                error = (f"decoded length was off by {off} samples before restoration, "
                         f"beyond the codec's tolerance of {facts['length_tolerance']}")

    if not error and replay:
        rep_stage, rep_report = stage("replay", Job.decode(received, replay_path, work / "replay.report.json",
                                                           warm_repeats=repeats, device=device))
        stages.append(rep_stage)
        reports["replay"] = rep_report
        error = rep_stage.error or _device_problem("replay", rep_report, device)
        if not error:
            fields["replay_sha256"] = sha256_file(replay_path)
            fields["replay_identical"] = fields["replay_sha256"] == fields["decoded_sha256"]
            replay_path.unlink()
            error = replay_failure(fields["decoded_sha256"], fields["replay_sha256"])

    scoring_start = time.perf_counter()
    metrics = _score(scorer, ref, decoded_path if not error else None, error)
    scoring_s = time.perf_counter() - scoring_start if scorer is not None else None
    status, checks_passed, error = settle(error, fields)
    return _row(spec, ref, opts, run, mode, replay, fields, checkpoint=checkpoint, runtime=runtime,
                weights=str(model.get("weights", "none")), checks_passed=checks_passed, codec_facts=codec_facts,
                metrics=metrics, scoring_s=scoring_s,
                metrics_code_sha256=scorer.code_sha256 if scorer is not None else None,
                model=model, stages=stages, status=status, error=error, channel=channel,
                device=row_device(opts, spec.family, reports),
                metric_devices=scorer.devices if scorer is not None and metrics else {})


def _clear_outputs(run: RunDir, outputs: dict[str, Path]) -> str:
    """Remove what an earlier attempt left where a row writes; "" when every path is clear. Only a
    file or a link is removed: anything else there (a directory, a FIFO) was not written by
    codecarena and may hold someone's data, so it stays and the reason says what to do."""
    for what, path in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file() or not path.exists():
            path.unlink(missing_ok=True)
            continue
        kind = "a directory" if path.is_dir() else "not a regular file"
        return (f"{run.relative(path)} is {kind}, where this row writes its {what}; move or remove it, then rerun "
                f"the same command to resume")
    return ""


# Row fields that only a stage can produce: None until it did.
_OUTCOME_FIELDS = ("payload", "payload_bytes", "payload_sha256", "representation_bits", "representation_bps",
                   "payload_bps", "decoded", "decoded_sha256", "replay_sha256", "replay_identical", "decoded_samples",
                   "trimmed_samples", "padded_samples", "length_tolerance", "finite", "silent", "clipped_samples")


def _row(spec: CodecSpec, ref: Reference, opts: RunOptions, run: RunDir, mode: str, replay: bool,
         fields: dict[str, Any], **rest: Any) -> Row:
    """A row: identity and reference from the task, outcome fields from `fields`, the rest as given."""
    for external in opts.external:
        if external.family == spec.family:
            rest["runtime"] = {**rest["runtime"], **external.row_fields()}
    return Row(version=ROW_VERSION, codec=spec.canonical, family=spec.family, config=spec.config_dict(),
               registry=_runtime_of(opts, spec.family)[0], variant=opts.variant, mode=mode,
               utterance=ref.utterance.id, language=ref.utterance.language, speaker=ref.utterance.speaker,
               sample_rate=ARENA_RATE,
               num_samples=ref.num_samples, duration_s=ref.num_samples / ARENA_RATE,
               reference=run.relative(ref.path), reference_sha256=ref.sha256,
               reference_resampled_from=ref.resampled_from, reference_conversions=list(ref.conversions),
               replay_sampled=replay, limits=opts.limits,
               **{name: fields.get(name) for name in _OUTCOME_FIELDS}, **rest, row_sha256=None).sealed()


def row_files_verify(row: Row, run: RunDir) -> bool:
    """A completed row counts on resume only if the files it names are inside the run and still have
    its hashes."""
    if row.status != "ok" or row.payload is None or row.decoded is None:
        return False
    for rel, digest in ((row.payload, row.payload_sha256), (row.decoded, row.decoded_sha256),
                        (row.reference, row.reference_sha256)):
        try:
            path = run.resolve(rel)
        except UnsafePathError:
            return False
        if not path.is_file() or sha256_file(path) != digest:
            return False
    return channel_stage.files_verify(row.channel, run)


def rows_to_rebuild_reference_results(kept: dict[tuple[str, str], Row], plan: Plan, run: RunDir) -> list[tuple[str, str]]:
    """Per reference whose reference-side results some kept row relied on but the run no longer holds
    (a deleted `reference_results/`), the first such row in plan order: computing it again stores them
    again, which the kept rows of that reference then agree with (the audit checks that they do)."""
    relied = {key: reliances(row.reference_sha256, row.metrics) for key, row in kept.items()}
    lost = missing(run.reference_results(), set().union(*relied.values()))
    chosen: dict[str, tuple[str, str]] = {}
    for key in plan.keys():
        for need in relied.get(key, set()) & lost:
            chosen.setdefault(need.reference_sha256, key)
    return list(dict.fromkeys(chosen.values()))


class Executor(Protocol):
    """Runs tasks and yields their rows in any order; it never writes rows.jsonl itself."""

    def describe(self) -> dict[str, Any]: ...

    def rows(self, tasks: list[Task], opts: RunOptions, scorer: Scorer | None) -> Generator[Row, None, None]: ...


def failed_row(task: Task, opts: RunOptions, error: str) -> Row:
    """A row that never reached a worker (its executor process died, or something not codecarena's
    is where it writes): failed, with the reason."""
    # weights "none" as for any row whose worker reported no model (the plan holds the run's weights).
    return _row(task.spec, task.ref, opts, RunDir(opts.out), task.mode, task.replay, {}, checkpoint={}, runtime={},
                weights="none", checks_passed=False, codec_facts={}, metrics={}, scoring_s=None,
                metrics_code_sha256=None, model={}, stages=[], status="failed", error=error, channel=None,
                device=row_device(opts, task.spec.family, {}), metric_devices={})


def plan_tasks(evalset: EvalSet, opts: RunOptions, skip: Iterable[tuple[str, str]],
               reference: Callable[[Utterance], Reference]) -> list[Task]:
    """The rows still to compute, in plan order. Sample membership depends only on the row's index
    within its codec configuration, so a resumed run samples the same rows."""
    done = set(skip)
    tasks = []
    for spec in opts.codecs:
        for index, utt in enumerate(evalset.utterances):
            if (spec.canonical, utt.id) in done:
                continue
            mode = "warm" if opts.mode == "warm" and index >= opts.cold_sample else "cold"
            replay = opts.replay_sample is None or index < opts.replay_sample
            tasks.append(Task(spec, reference(utt), mode, replay))
    return tasks


def execute(
    evalset: EvalSet,
    opts: RunOptions,
    run_info: dict[str, Any],
    executor: Executor,
    on_row: Callable[[Row, bool], None] | None = None,
    scorer: Scorer | None = None,
    add: bool = False,
) -> list[Row]:
    """Run (or resume) every codec x utterance row into opts.out; return the rows in plan order.
    With `add`, the codec configurations of `opts` join those of the run already in opts.out (every
    other part of the plan must be the same), and the run covers all of them."""
    # Executors may run rows in processes with another working directory.
    opts = dataclasses.replace(opts, out=opts.out.resolve())
    run_dir = opts.out
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        with RunDir(run_dir).locked():
            return _execute_locked(evalset, opts, run_info, on_row, scorer, executor, add)
    except RunLockError as exc:
        raise RunError(str(exc)) from None


def added_codecs(previous: Plan, opts: RunOptions) -> RunOptions:
    """`opts` with the earlier run's codec configurations first and the new ones after them, or
    RunError naming what else differs between the two plans."""
    known = [c.codec for c in previous.codecs]
    codecs = tuple(parse_configuration(c) for c in known) + tuple(s for s in opts.codecs if s.canonical not in known)
    runtimes = tuple(dict.fromkeys([tuple(r) for r in previous.runtimes] + list(opts.runtimes)))
    mixed = mixed_runtimes(previous.runtimes, opts.runtimes)
    if mixed:
        raise RunError(f"--add: {mixed}")
    return dataclasses.replace(opts, codecs=codecs, runtimes=runtimes)  # type: ignore[arg-type]


def changed_binaries(before: dict[str, Any], now: dict[str, Any]) -> str:
    """The first binary of a command-line family (run.json's runtime records, by registry id) whose
    identity differs between two invocations, said in words; "" when none does."""
    for registry_id in sorted(before.keys() & now.keys()):
        old = {b["name"]: b for b in before[registry_id].get("binaries", [])}
        new = {b["name"]: b for b in now[registry_id].get("binaries", [])}
        for name in sorted(old.keys() | new.keys()):
            if old.get(name) != new.get(name):
                was, is_ = old.get(name) or {}, new.get(name) or {}
                fields = [k for k in ("resolved", "sha256", "package", "version") if was.get(k) != is_.get(k)]
                detail = ", ".join(f"{k} {was.get(k) or '-'} -> {is_.get(k) or '-'}" for k in fields)
                return f"binary {name} of {registry_id} changed ({detail or 'added or removed'})"
    return ""


def _plan_differences(a: Plan, b: Plan) -> list[str]:
    return [f.name for f in dataclasses.fields(Plan) if getattr(a, f.name) != getattr(b, f.name)]


def planned(evalset: EvalSet, opts: RunOptions, add: bool = False) -> tuple[RunOptions, Plan, RunRecord | None]:
    """What a run into opts.out follows: the options (with `add`, the earlier run's codec
    configurations first, then the new ones), their plan, and the earlier run's record if there is
    one; RunError when the directory holds a run this command may not continue, saying what to do.
    `codecarena run` calls it before printing anything about the run, `execute` again under the lock."""
    run = RunDir(opts.out)
    if add and not run.run_json.exists():
        raise RunError(f"{run.root}: --add needs an existing run to add codec configurations to")
    plan = plan_from_dict(plan_of(evalset, opts))
    if not run.run_json.exists():
        return opts, plan, None
    try:
        earlier = read_record(run)
    except RunLoadError as exc:
        raise RunError(f"{exc}; use another --out directory") from None
    previous = on_the_cpu_if_older(earlier.plan)
    if previous.references is None:
        raise RunError(f"{run.root}: holds a run made before plans pinned references, transcripts and user "
                       f"checkpoints (run.json version {earlier.version}), whose rows cannot be tied to "
                       f"them; use another --out directory")
    for key, option in (("device", "--device"), ("metric_device", "--metric-device")):
        was, now = getattr(previous, key), getattr(plan, key)
        if was is not None and was != now:
            raise RunError(f"{run.root}: holds a run with {option} {was}, this command asks for {now}: another "
                           f"device is another configuration, never a resume; use a new --out directory")
    if add:
        opts = added_codecs(previous, opts)
        plan = plan_from_dict(plan_of(evalset, opts))
        repinned = [p.codec for p in previous.user_pins or () if p not in (plan.user_pins or ())]
        if repinned:
            raise RunError(f"{run.root}: --add: the user pin of {', '.join(repinned)} changed since the run; "
                           f"pin the run's files again (see user_pins in its run.json) or use another --out")
        others = [d for d in _plan_differences(previous, plan) if d not in ("codecs", "runtimes", "user_pins")]
        if others:
            raise RunError(f"{run.root}: --add adds codec configurations only, but the run differs in "
                           f"{', '.join(others)}; use the same options as the run (see its run.json)")
    elif previous != plan:
        differs = _plan_differences(previous, plan)
        repin = (" (a user pin changed since the run: pin the run's files again, see its run.json)"
                 if "user_pins" in differs else "")
        raise RunError(f"{run.root}: holds a run with a different plan ({', '.join(differs)}){repin}"
                       f"{_what_to_do(previous, plan, differs)}")
    return opts, plan, earlier


def _what_to_do(previous: Plan, plan: Plan, differs: list[str]) -> str:
    """The end of the refusal of a run whose plan differs from this command's."""
    tail = "; use another --out directory"
    if differs not in (["codecs"], ["codecs", "runtimes"]):
        return tail
    had = [c.codec for c in previous.codecs]
    named = [c.codec for c in plan.codecs]
    if any(c not in had for c in named):
        return f" (to add codec configurations to it, rerun with --add){tail}"
    run_has = f": it has the codec configurations {', '.join(had)}"
    if len(named) < len(had):  # e.g. the command that made a run which --add has extended since
        return (f"{run_has} and this command names only some of them; to resume the whole run, rerun this command "
                f"with --add; for a run of only these, use another --out directory")
    if named != had:
        return f"{run_has} and this command names them in another order; to resume it, rerun this command with --add"
    return tail


def _execute_locked(evalset: EvalSet, opts: RunOptions, run_info: dict[str, Any],
                    on_row: Callable[[Row, bool], None] | None, scorer: Scorer | None,
                    executor: Executor, add: bool = False) -> list[Row]:
    run_dir = opts.out
    run = RunDir(run_dir)
    opts, plan, earlier = planned(evalset, opts, add)
    # run.json is rewritten below: the invocations before this one stay in its history, so an
    # --add keeps the plan it extended (by hash and codecs) and the command that made it.
    history = earlier.as_history() if earlier is not None else []
    changed = changed_binaries(earlier.runtimes, run_info.get("runtimes", {})) if earlier is not None else ""
    if changed:
        raise RunError(f"{run_dir}: {changed} since the run started, so its rows came from another "
                       f"binary; use another --out directory")
    # The executor is not part of the plan: any executor must produce the same rows.
    record = RunRecord(**{**run_info, "version": RUN_VERSION}, plan=plan, plan_sha256=plan.sha256, history=history,
                       skipped_inputs=[{"file": name, "reason": reason} for name, reason in evalset.skipped],
                       execution=executor.describe(), finished=False)
    write_json(run.run_json, record.to_dict())

    existing, _torn = store.load_rows(run_dir, plan.keys())
    wanted = {(s.canonical, u.id) for s in opts.codecs for u in evalset.utterances}
    kept: dict[tuple[str, str], Row] = {}
    for row in existing:
        # A row edited since it was computed, one the plan does not pin as it is (a forged reference or
        # transcript, another checkpoint) or whose verdict is not its status is computed again.
        if row.key in wanted and row.intact and row_files_verify(row, run) and not plan.row_problems(row) \
                and not status_problem(row):
            kept[row.key] = row
    for key in rows_to_rebuild_reference_results(kept, plan, run):
        del kept[key]
    # Rewriting drops failed rows (they are retried), a torn final line, and rows whose files changed.
    store.rewrite_rows(run_dir, list(kept.values()))
    if on_row:
        for row in kept.values():
            on_row(row, True)

    references: dict[str, Reference] = {}
    pinned = {r.id: r.sha256 for r in plan.references or ()}

    def reference(utt: Utterance) -> Reference:
        if utt.id not in references:
            try:
                ref = prepare_reference(utt, run)
            except ReferenceCopyError as exc:
                raise RunError(str(exc)) from None
            if ref.sha256 != pinned[utt.id]:
                raise RunError(f"{ref.path}: sha256 {ref.sha256} is not the plan's {pinned[utt.id]} "
                               f"(did {utt.path} change during the run?)")
            references[utt.id] = ref
        return references[utt.id]

    tasks = plan_tasks(evalset, opts, kept, reference)
    needed = [row_bytes(task.ref.num_samples) for task in tasks]
    if needed and free_bytes(run_dir) < max(needed):
        raise DiskFullError(run_dir, sum(needed))
    start = time.perf_counter()
    done: dict[tuple[str, str], Row] = dict(kept)
    rows = executor.rows(tasks, opts, scorer)
    try:
        for row in rows:
            # A row that failed because the disk filled up is not the codec's failure: stop, keep
            # the completed rows, and let the rerun compute it.
            if row.status == "failed" and free_bytes(run_dir) < row_bytes(row.num_samples):
                raise DiskFullError(run_dir, sum(needed[len(done) - len(kept):]))
            store.append_row(run_dir, row)
            done[row.key] = row
            if on_row:
                on_row(row, False)
    finally:
        rows.close()  # stops the executor's remaining work when this loop ends early
    rows_wall = time.perf_counter() - start
    missing = wanted - done.keys()
    if missing:
        raise RunError(f"{run_dir}: the executor returned no row for {len(missing)} tasks, e.g. {sorted(missing)[0]}")
    rows = [done[(s.canonical, u.id)] for s in opts.codecs for u in evalset.utterances]
    write_json(run.summary, {**summarize(rows), "ledger": ledger.build(rows, run)})
    execution = {**executor.describe(), "rows_computed": len(tasks), "rows_resumed": len(kept),
                 "rows_wall_s": rows_wall, **({"scoring_threads": THREAD_SETTINGS} if scorer is not None else {})}
    write_json(run.run_json, dataclasses.replace(record, execution=execution, finished=True).to_dict())
    return rows
