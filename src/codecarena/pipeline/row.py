"""One row: a codec configuration x an utterance, each stage in a guarded worker process.

encode (reference -> payload file) -> the row's channel, if it has one -> decode (payload only ->
wav) -> replay (decode again in another fresh process; sha256 must match) -> checks -> accounting ->
metrics -> the row, its status from the one verdict (results/verdict.py). In cold mode every stage
is a fresh process; in warm mode encode and decode go to a persistent worker that keeps the model
loaded, and the replay still runs in a fresh process. Every file comes from the run's `RunDir`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import soundfile as sf

from codecarena.arena import ARENA_RATE
from codecarena.channel import stage as channel_stage
from codecarena.channel.packets import cutting
from codecarena.channel.spec import ChannelError
from codecarena.files import sha256_file
from codecarena.conditions.agreement import agreement
from codecarena.metrics.declarations import against_input
from codecarena.metrics.scorer import RowScorer, UtteranceInfo
from codecarena.payload import PayloadError, read_payload
from codecarena.plural import counted
from codecarena.pipeline import conditioned
from codecarena.pipeline.plan import RunPlan
from codecarena.references import Reference
from codecarena.registry.catalog import FAMILIES
from codecarena.results.schema import ROW_VERSION, Row
from codecarena.results.verdict import replay_failure, settle
from codecarena.rundir import RowFiles, RunDir
from codecarena.runtime.persistent import WorkerSet
from codecarena.runtime.protocol import Job, StageReport
from codecarena.runtime.stages import Stage, run_stage, run_stage_warm
from codecarena.runtime.templates import TemplateSet
from codecarena.sandbox import for_family
from codecarena.specs import CodecSpec

# Below this RMS a decoded utterance counts as silent (the reference never is).
SILENCE_DBFS = -60.0

# Row fields that only a stage can produce: None until it did.
_OUTCOME_FIELDS = ("payload", "payload_bytes", "payload_sha256", "representation_bits", "representation_bps",
                   "payload_bps", "decoded", "decoded_sha256", "replay_sha256", "replay_identical", "decoded_samples",
                   "trimmed_samples", "padded_samples", "length_tolerance", "finite", "silent", "clipped_samples")

@dataclass(frozen=True)
class Task:
    """One row to compute: everything an executor needs to hand to a row runner, picklable."""
    spec: CodecSpec
    ref: Reference
    mode: str  # "cold" or "warm"
    replay: bool  # in the replay sample
    repeats: bool  # runs cold and is in the warm sample: encode and decode repeat the codec call for the warm RTF
    # The references of the other utterances the row's condition draws from (a babble's talkers).
    talkers: tuple[Reference, ...] = ()


def row_device(plan: RunPlan, family: str, reports: dict[str, StageReport | None]) -> dict[str, Any]:
    """The row's `device` (docs/results.md): asked, used, whether --device applied to the family, the
    device facts its encode worker reported and each stage's peak device memory."""
    encode = reports.get("encode")
    return {"requested": plan.device, "device": plan.stage_device(family), "applied": FAMILIES[family].torch,
            "info": encode.device if encode is not None else None,
            "peak_device_memory_bytes": {name: report.peak_device_memory_bytes if report is not None else None
                                         for name, report in reports.items()}}


def _device_problem(name: str, report: StageReport | None, device: str) -> str:
    """A stage whose worker says it ran on another device than the row's (the worker reports only what
    it checked, so this catches an old or foreign worker)."""
    if report is None or report.device is None or report.device.get("device") == device:
        return ""
    return f"{name} worker ran on {report.device.get('device')}, the row's device is {device}"


def _score(scorer: RowScorer | None, ref: Reference, decoded_path: Path | None, failure: str,
           against: Path | None = None) -> dict[str, Any]:
    """The row's metric records: every metric against the clean reference and the transcript, or with
    `against` (a conditioned input) the metrics that compare with a reference signal against that file. A
    RowRunner's scorer is a GuardedScorer: the metrics run in its scoring process, so none of them can
    kill this one."""
    if scorer is None:
        return {}
    only = against_input(scorer.metrics) if against is not None else None
    if failure or decoded_path is None:
        return scorer.failed_all(f"no decoded audio to score: {failure}", only)
    utt = ref.utterance
    info = UtteranceInfo(utt.id, utt.language, utt.transcript, utt.critical)
    return scorer.score_files(info, against or ref.path, decoded_path, only)


class _Stages:
    """The stages of one row as they ran: their records and reports, and where they write."""

    def __init__(self, task: Task, plan: RunPlan, files: RowFiles, workers: WorkerSet | None,
                 templates: TemplateSet | None) -> None:
        self.task, self.plan, self.files, self.workers, self.templates = task, plan, files, workers, templates
        self.records: list[Stage] = []
        self.reports: dict[str, StageReport | None] = {}
        self.device = plan.stage_device(task.spec.family)
        self.repeats = plan.plan.warm_repeats if task.repeats else 0

    def report(self, name: str) -> Path:
        """Where the stage `name` reports."""
        return self.plan.run.stage(self.task.spec.slug, self.task.ref.utterance.id, name).report

    def run(self, name: str, job: Job, codec: CodecSpec | None = None) -> tuple[Stage, StageReport | None]:
        """The stage, warm (a persistent worker) or cold (a fresh process in its private folder: forked
        from its runtime's template when the runner holds templates, a user codec's in its sandbox); ""
        or why it failed, its worker's device included. `codec` runs a
        condition's hop (another codec's, or an earlier generation's): always cold."""
        spec = codec or self.task.spec
        python = self.plan.runtime_of(spec.family)[1]
        files = self.plan.run.stage(self.task.spec.slug, self.task.ref.utterance.id, name)
        warm = self.task.mode == "warm" and name in ("encode", "decode") and not (
            name == "decode" and FAMILIES[spec.family].fresh_process_decode)
        if warm:
            assert self.workers is not None
            stage, report = run_stage_warm(name, job, files, self.workers.get(python, spec))
        else:
            stage, report = run_stage(name, job, self.plan.limits, files, python, for_family(spec.family),
                                      self.templates)
        self.records.append(stage)
        self.reports[name] = report
        return stage, report

    def hop(self, name: str, job: Job, codec: CodecSpec) -> str:
        """A condition's hop stage (pipeline/conditioned.py): "" or why it failed."""
        stage, report = self.run(name, job, codec)
        return stage.error or _device_problem(name, report, self.plan.stage_device(codec.family))

    def error(self, name: str, stage: Stage, report: StageReport | None) -> str:
        return stage.error or _device_problem(name, report, self.device)


def run_row(task: Task, plan: RunPlan, scorer: RowScorer | None = None, workers: WorkerSet | None = None,
            templates: TemplateSet | None = None) -> Row:
    """One row. A warm task sends encode and decode to `workers` (one persistent worker per runtime);
    the replay, when this row is in the replay sample, always runs in a fresh process. Fresh processes
    are forked from `templates` (one per runtime) when given, else new interpreters."""
    if task.mode == "warm" and workers is None:
        raise ValueError("warm mode needs a WorkerSet")
    spec, ref, run = task.spec, task.ref, plan.run
    files = run.row(spec.slug, ref.utterance.id)
    files.work.mkdir(parents=True, exist_ok=True)
    blocked = _clear_outputs(run, {"payload": files.payload, "decoded audio": files.decoded, "replay": files.replay,
                                   **({"impaired payload": files.impaired, "channel trace": files.trace}
                                      if spec.channel else {}), **_condition_outputs(task, plan, files)})
    if blocked:
        return failed_row(task, plan, blocked)
    stages = _Stages(task, plan, files, workers, templates)
    fields: dict[str, Any] = {}
    # The encoder gets the conditioned input when the configuration has a condition (docs/conditions.md).
    error, source, condition = conditioned.make_input(spec, ref, task.talkers, plan, files, stages.hop)
    encoded: tuple[dict[str, Any], ...] = ({}, {}, {}, {})
    if not error:
        error, encoded = _encode(stages, fields, source)
    model, runtime, codec_facts, checkpoint = encoded
    if not error and condition is not None and condition["model"] == "gen":
        try:
            condition["agreement"] = agreement(read_payload(run.resolve(condition["hops"][-1]["payload"])),
                                               read_payload(files.payload))
        except (PayloadError, ValueError) as exc:
            error = f"condition {spec.condition}: the payload cannot be compared with the last generation's: {exc}"
    # The decoder gets the payload as the row's channel delivers it (docs/channel.md).
    received, channel = files.payload, None
    if not error and spec.channel:
        try:
            received, channel = channel_stage.cross(
                spec.channel, spec.family, cutting(spec.family, spec.config, spec.options(), spec.canonical),
                ref.utterance.id, run, files)
        except (ChannelError, PayloadError, OSError, ValueError) as exc:
            error = f"channel {spec.channel}: {exc}"
    if not error:
        error = _decode(stages, received, fields, codec_facts)
    if not error and task.replay:
        error = _replay(stages, received, fields)

    scoring_start = time.perf_counter()
    metrics = _score(scorer, ref, files.decoded if not error else None, error)
    input_metrics = (_score(scorer, ref, files.decoded if not error else None, error, source)
                     if condition is not None and scorer is not None else None)
    scoring_s = time.perf_counter() - scoring_start if scorer is not None else None
    status, checks_passed, error = settle(error, fields)
    return _row(task, plan, fields, checkpoint=checkpoint, runtime=runtime,
                weights=str(model.get("weights", "none")), checks_passed=checks_passed, codec_facts=codec_facts,
                metrics=metrics, scoring_s=scoring_s,
                metrics_code_sha256=scorer.code_sha256 if scorer is not None else None,
                model=model, stages=stages.records, status=status, error=error, channel=channel,
                device=row_device(plan, spec.family, stages.reports),
                metric_devices=scorer.devices if scorer is not None and metrics else {},
                condition=condition, input_metrics=input_metrics)


def _encode(stages: _Stages, fields: dict[str, Any], source: Path) -> tuple[str, tuple[dict[str, Any], ...]]:
    """The encode stage of `source` (the reference, or the row's conditioned input) and what it wrote: ""
    or why the row fails, and the model, runtime, codec facts and checkpoint identity the worker and its
    payload report."""
    task, plan, files = stages.task, stages.plan, stages.files
    spec, ref = task.spec, task.ref
    model: dict[str, Any] = {}
    runtime: dict[str, Any] = {}
    codec_facts: dict[str, Any] = {}
    checkpoint: dict[str, Any] = {}
    stage, report = stages.run("encode", Job.encode(source, files.payload, stages.report("encode"),
                                                    spec.bare.canonical, warm_repeats=stages.repeats,
                                                    weights=plan.plan.weights, variant=plan.variant,
                                                    device=stages.device))
    error = stages.error("encode", stage, report)
    if error or report is None:
        return error, (model, runtime, codec_facts, checkpoint)
    model, runtime, codec_facts = report.model, report.runtime, dict(report.facts)
    try:
        payload = read_payload(files.payload)
    except PayloadError as exc:
        return f"encode wrote an unreadable payload: {exc}", (model, runtime, codec_facts, checkpoint)
    if payload.codec != spec.bare.canonical or payload.num_samples != ref.num_samples:
        error = (f"{files.payload}: payload says {payload.codec} / {counted(payload.num_samples, 'sample')}, "
                 f"expected {spec.bare.canonical} / {ref.num_samples}")
    checkpoint = dict(payload.checkpoint)
    bits = payload.representation_bits()
    size = files.payload.stat().st_size
    duration = ref.num_samples / ARENA_RATE
    fields.update(
        payload=plan.run.relative(files.payload), payload_bytes=size, payload_sha256=sha256_file(files.payload),
        representation_bits=bits, representation_bps=bits / duration if duration else None,
        payload_bps=size * 8 / duration if duration else None,
    )
    return error, (model, runtime, codec_facts, checkpoint)


def _decode(stages: _Stages, received: Path, fields: dict[str, Any], codec_facts: dict[str, Any]) -> str:
    """The decode stage of the payload as received, and the checks of what it wrote: "" or why the row fails."""
    files, ref = stages.files, stages.task.ref
    stage, report = stages.run("decode", Job.decode(received, files.decoded, stages.report("decode"),
                                                    warm_repeats=stages.repeats, device=stages.device))
    error = stages.error("decode", stage, report)
    if error or report is None:
        return error
    facts = report.facts
    codec_facts["decode"] = facts
    info = sf.info(files.decoded)
    rms = facts.get("rms_dbfs")
    fields.update(
        decoded=stages.plan.run.relative(files.decoded), decoded_sha256=sha256_file(files.decoded),
        decoded_samples=info.frames, trimmed_samples=facts["trimmed_samples"],
        padded_samples=facts["padded_samples"], length_tolerance=facts["length_tolerance"],
        finite=True, silent=rms is None or rms < SILENCE_DBFS,
        clipped_samples=facts["clipped_samples"],
    )
    off = facts["trimmed_samples"] + facts["padded_samples"]
    if info.frames != ref.num_samples or info.samplerate != ARENA_RATE:
        return (f"{files.decoded}: {counted(info.frames, 'sample')} at {info.samplerate} Hz, "
                f"expected {ref.num_samples} at {ARENA_RATE} Hz")
    if off > facts["length_tolerance"]:
        return (f"decoded length was off by {counted(off, 'sample')} before restoration, "
                f"beyond the codec's tolerance of {facts['length_tolerance']}")
    return ""


def _replay(stages: _Stages, received: Path, fields: dict[str, Any]) -> str:
    """The payload decoded again in a fresh process: "" or why the row fails (a replay that differs fails it)."""
    files = stages.files
    stage, report = stages.run("replay", Job.decode(received, files.replay, stages.report("replay"),
                                                    warm_repeats=stages.repeats, device=stages.device))
    error = stages.error("replay", stage, report)
    if error:
        return error
    fields["replay_sha256"] = sha256_file(files.replay)
    fields["replay_identical"] = fields["replay_sha256"] == fields["decoded_sha256"]
    files.replay.unlink()
    return replay_failure(fields["decoded_sha256"], fields["replay_sha256"])


def _condition_outputs(task: Task, plan: RunPlan, files: RowFiles) -> dict[str, Path]:
    """Where a row's condition writes: its conditioned input, trace and hops' files."""
    if not task.spec.condition:
        return {}
    hops = {f"hop {k} {what}": path for k in range(1, len(task.spec.hops()) + 1)
            for what, path in zip(("payload", "audio"), plan.run.hop(task.spec.slug, task.ref.utterance.id, k))}
    return {"conditioned input": files.condition_input, "condition trace": files.condition_trace, **hops}


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


def failed_row(task: Task, plan: RunPlan, error: str) -> Row:
    """A row that never reached a worker (its executor process died, or something not codecarena's
    is where it writes): failed, with the reason."""
    # weights "none" as for any row whose worker reported no model (the plan holds the run's weights).
    return _row(task, plan, {}, checkpoint={}, runtime={}, weights="none", checks_passed=False, codec_facts={},
                metrics={}, scoring_s=None, metrics_code_sha256=None, model={}, stages=[], status="failed",
                error=error, channel=None, device=row_device(plan, task.spec.family, {}), metric_devices={},
                condition=None, input_metrics=None)


def _row(task: Task, plan: RunPlan, fields: dict[str, Any], **rest: Any) -> Row:
    """A row: identity and reference from the task, outcome fields from `fields`, the rest as given."""
    spec, ref = task.spec, task.ref
    for external in plan.external:
        if external.family == spec.family:
            rest["runtime"] = {**rest["runtime"], **external.row_fields()}
    return Row(version=ROW_VERSION, codec=spec.canonical, family=spec.family, config=spec.config_dict(),
               registry=plan.runtime_of(spec.family)[0], variant=plan.variant, mode=task.mode,
               utterance=ref.utterance.id, language=ref.utterance.language, speaker=ref.utterance.speaker,
               sample_rate=ARENA_RATE,
               num_samples=ref.num_samples, duration_s=ref.num_samples / ARENA_RATE,
               reference=plan.run.relative(ref.path), reference_sha256=ref.sha256,
               reference_resampled_from=ref.resampled_from, reference_conversions=list(ref.conversions),
               replay_sampled=task.replay, limits=plan.limits,
               **{name: fields.get(name) for name in _OUTCOME_FIELDS}, **rest, row_sha256=None).sealed()
