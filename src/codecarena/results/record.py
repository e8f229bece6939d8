"""`run.json` as a typed, strictly parsed record (exact keys, types, a known version); results/run.py
loads a whole run directory around it.

Version 2 moved the stage limits out of the plan (rows record them); a version 1 record is read with
those three plan keys kept in `Plan.legacy_limits`, and is otherwise the same. Version 3 added
`skipped_inputs`; an older record reads with None there (not recorded, which is not "none skipped").
Version 4 added `history`, the earlier invocations whose record this one replaced (resumed or
extended with --add); an older record reads with None there (not recorded). Version 5 added to the
plan what it pins of every utterance (`references`: the sha256 of the run's copy of its audio, its
language, speaker, transcript and critical entities) and of every user-pinned checkpoint
(`user_pins`); an older plan reads with None there, which the audit reports as not auditable and a
resume refuses (its rows cannot be tied to what they were computed from). Version 6 added the pins
of every user codec the run uses (`user_codecs`: declaration, source, checkpoints, requirements);  an
older record reads with None there (no user codec could run before it). Version 7 added the devices
(`device`, where torch families run, and `metric_device`, where learned metrics run); an older record
reads with None there (everything ran on the CPU then). Version 8 added the files of every --noise-dir and
--rir-dir set a condition draws from (`file_sets`, docs/conditions.md), in a plan that has any (a plan
without them is written as before, so its hash, and the run it names, stay the same). Version 9 added
the shared libraries a user's command-line codec's programs load (`user_codecs[].libraries`: program,
path, size, sha256), in the pin of a codec that has them (the pin of any other is written as before,
so its hash stays the same); an older record that names them is refused. Version 10 added
`warm_sample`, the rows per codec configuration whose cold stages repeat the codec call for the warm RTF
(`--warm-sample`), in a plan that leaves some such row out (a plan where every cold row repeats, as
every row did before, is written as before, so its hash stays the same and an older run resumes with
`--warm-sample all`); an older record reads with None there, and one that names it is refused.

Long because it is the strict parser of run.json: the typed record and a reader for each of its ten
versions, each key checked where it is read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from codecarena.conditions.sets import FileSet, SetFile
from codecarena.devices import DeviceError, DeviceInfo, parse_device
from codecarena.files import JSONFileError, read_json, sha256_json
from codecarena.metrics.engines import devices_of
from codecarena.registry.catalog import FAMILIES
from codecarena.registry.libraries import Library
from codecarena.results.schema import Row, SchemaError, from_dict
from codecarena.rundir import RunDir

RUN_VERSION = 10
_V1_PLAN_LIMITS = ("memory_limit_bytes", "guard_poll_s", "stage_timeout_s")
_V5_PLAN_FIELDS = ("references", "user_pins")
_V7_PLAN_FIELDS = ("device", "metric_device")


@dataclass(frozen=True)
class PlanCodec:
    codec: str  # canonical spec
    config: dict[str, Any]  # every option with the value that ran


@dataclass(frozen=True)
class PlanReference:
    """What the evaluation set says of one utterance, and the run's copy of its audio: every row of
    the utterance must agree with it."""
    id: str
    sha256: str  # of the run's copy (references/<id>.*): the input file's bytes, or their conversion
    language: str
    speaker: str
    transcript: str | None
    critical: list[list[str]]  # [kind, text] of each critical entity


@dataclass(frozen=True)
class PlanSetFile:
    name: str
    sha256: str
    samples: int


@dataclass(frozen=True)
class PlanFileSet:
    """A folder of recordings a condition draws from (`--noise-dir`, `--rir-dir`), every file pinned."""
    kind: str  # "noise" or "rir"
    name: str
    files: list[PlanSetFile]  # in name order

    def as_set(self) -> FileSet:
        return FileSet(self.kind, self.name, tuple(SetFile(f.name, f.sha256, f.samples) for f in self.files))

    @classmethod
    def of(cls, found: FileSet) -> PlanFileSet:
        return cls(found.kind, found.name, [PlanSetFile(f.name, f.sha256, f.samples) for f in found.files])


@dataclass(frozen=True)
class PlanUserPin:
    codec: str  # canonical spec
    checkpoint: dict[str, str]  # the identity every payload of the configuration must record


@dataclass(frozen=True)
class PlanUserCodec:
    """What a run pins of a user codec (registry/user_units.py): any change is another codec."""
    name: str
    declaration_sha256: str
    source_sha256: str | None  # None for a command-line codec
    checkpoints: dict[str, str]  # file name -> sha256
    requirements_sha256: str | None  # None when it runs in the harness's environment
    binaries: dict[str, str]  # a command-line codec's programs: name -> sha256 ({} for a Python codec)
    # The shared libraries those programs load; None for a Python codec (and before version 9).
    libraries: list[Library] | None = None

    @property
    def registry(self) -> str:
        return f"user-{self.name}"

    def to_dict(self) -> dict[str, Any]:
        """As run.json holds it: without libraries where it pins none, as before version 9."""
        data = asdict(self)
        if data["libraries"] is None:
            del data["libraries"]
        return data

    def checkpoint(self) -> dict[str, str]:
        """The checkpoint identity every payload of this codec records."""
        return {"registry": self.registry, "revision": "user codec", **self.checkpoints}

    @property
    def sha256(self) -> str:
        """Of the whole pin, as a row records it (`model.user_codec.pin_sha256`, registry/user_units.py)."""
        return sha256_json(self.to_dict())


def _library_pins(plan: Any, version: Any) -> Any:
    """A plan's JSON form with every user codec's `libraries` given (None where it was left out);
    a record before version 9 that names them is refused."""
    if not isinstance(plan, dict) or not isinstance(plan.get("user_codecs"), list):
        return plan
    codecs = plan["user_codecs"]
    if version not in (9, RUN_VERSION) and any(isinstance(c, dict) and "libraries" in c for c in codecs):
        raise SchemaError(f"plan.user_codecs: unexpected key 'libraries' in a version {version} record")
    return {**plan, "user_codecs": [{"libraries": None, **c} if isinstance(c, dict) else c for c in codecs]}


# Transcript-scored ASR outputs record the transcript in their details once the ASR ran.
_TRANSCRIPT_OUTPUTS = ("wer", "cer", "ref_wer", "ref_cer")


def _details(record: Any) -> dict[str, Any]:
    details = record.get("details") if isinstance(record, dict) else None
    return details if isinstance(details, dict) else {}


@dataclass(frozen=True)
class Plan:
    """What determines the rows: a rerun into the same directory must have the same plan."""
    set: str
    manifest_sha256: str
    utterances: list[list[str]]  # [id, sha256] per utterance, in order
    codecs: list[PlanCodec]
    arena_rate: int
    weights: str
    variant: dict[str, Any]
    warm_repeats: int
    mode: str
    cold_sample: int | None
    replay_sample: int | None
    metrics: list[str]
    runtimes: list[list[str]]  # [family, registry id, interpreter]
    asr_models: list[list[str]]  # [language, ASR model: a catalogue name or a model folder]
    references: list[PlanReference] | None  # one per utterance, in order; None before version 5
    user_pins: list[PlanUserPin] | None  # one per configuration with --weights user; None before version 5
    user_codecs: list[PlanUserCodec] | None  # one per user codec family the run uses; None before version 6
    device: str | None  # --device: where torch families run (the others run on the CPU); None before version 7
    metric_device: str | None  # --metric-device: where learned metrics run; None before version 7
    legacy_limits: dict[str, Any] | None = None  # version 1 only: the limits the plan held then
    # The sets the plan's conditions draw from, every file pinned; None when it has none (and before version 8).
    file_sets: list[PlanFileSet] | None = None
    # --warm-sample: the first N rows of each configuration that run cold repeat the codec call for the warm
    # RTF; None when that leaves no such row out (every one repeats, as every one did before version 10).
    warm_sample: int | None = None

    def __post_init__(self) -> None:
        if any(len(u) != 2 for u in self.utterances):
            raise SchemaError("plan.utterances: expected [id, sha256] pairs")
        if self.mode not in ("cold", "warm"):
            raise SchemaError(f"plan.mode {self.mode!r} is not cold/warm")
        if self.references is not None and [r.id for r in self.references] != [u[0] for u in self.utterances]:
            raise SchemaError("plan.references: expected one per utterance, in the order of plan.utterances")
        if self.file_sets is not None and (not self.file_sets or len({(s.kind, s.name) for s in self.file_sets})
                                           != len(self.file_sets)):
            raise SchemaError("plan.file_sets: expected a non-empty list naming each set once")
        if self.warm_sample is not None and self.warm_sample < 0:
            raise SchemaError(f"plan.warm_sample {self.warm_sample!r} is not a count of rows")
        if self.references is not None and any(len(c) != 2 for r in self.references for c in r.critical):
            raise SchemaError("plan.references: expected critical entities as [kind, text] pairs")
        if self.user_pins is not None and not all(isinstance(k, str) and isinstance(v, str)
                                                  for p in self.user_pins for k, v in p.checkpoint.items()):
            raise SchemaError("plan.user_pins: a checkpoint identity maps names to strings")
        for key in _V7_PLAN_FIELDS:
            value = getattr(self, key)
            try:
                if value is not None and parse_device(value, f"plan.{key}") != value:
                    raise SchemaError(f"plan.{key} {value!r} is not spelled canonically")
            except DeviceError as exc:
                raise SchemaError(str(exc)) from None

    def keys(self) -> list[tuple[str, str]]:
        """(codec, utterance) of every planned row, in plan order."""
        return [(c.codec, u[0]) for c in self.codecs for u in self.utterances]

    def to_dict(self) -> dict[str, Any]:
        """The plan as run.json holds it (a version 1 plan with its limits back at the top level; a
        plan before version 5 without the fields it did not have)."""
        data = asdict(self)
        legacy = data.pop("legacy_limits")
        for added in (*_V5_PLAN_FIELDS, "user_codecs", *_V7_PLAN_FIELDS, "file_sets", "warm_sample"):
            if data[added] is None:
                del data[added]
        if self.user_codecs is not None:
            data["user_codecs"] = [c.to_dict() for c in self.user_codecs]
        return {**data, **(legacy or {})}

    def row_problems(self, row: Row) -> list[str]:
        """How a row disagrees with what the plan pins: its utterance's reference copy, language,
        speaker, the transcript and critical entities its ASR records were scored against, and a
        user-pinned configuration's checkpoint. Nothing for a plan before version 5, which pins none."""
        problems: list[str] = []
        pinned = {r.id: r for r in self.references or ()}.get(row.utterance)
        if pinned is not None:
            if row.reference_sha256 != pinned.sha256:
                problems.append(f"reference_sha256 {row.reference_sha256[:12]} is not the plan's "
                                f"{pinned.sha256[:12]} for this utterance")
            if (row.language, row.speaker) != (pinned.language, pinned.speaker):
                problems.append(f"language {row.language!r} and speaker {row.speaker!r} are not the plan's "
                                f"{pinned.language!r} and {pinned.speaker!r}")
            for output in _TRANSCRIPT_OUTPUTS:
                details = _details(row.metrics.get(output))
                if "hypothesis" in details and details.get("transcript") != pinned.transcript:
                    problems.append(f"{output} was scored against the transcript {details.get('transcript')!r}, "
                                    f"the plan's is {pinned.transcript!r}")
            critical = row.metrics.get("critical_survived")
            details = _details(critical)
            if "hypothesis" in details and isinstance(critical, dict) and critical.get("status") != "failed":
                entities = [[e.get("kind"), e.get("text")] if isinstance(e, dict) else e
                            for e in details.get("entities") or []]
                if entities != pinned.critical:
                    problems.append(f"critical_survived was scored on the entities {entities}, the plan's are "
                                    f"{pinned.critical}")
        user = {c.registry: c for c in self.user_codecs or ()}
        if row.registry in user:
            pinned_codec = user[row.registry]
            label = row.model.get("user_codec") if isinstance(row.model.get("user_codec"), dict) else {}
            if row.checkpoint and row.checkpoint != pinned_codec.checkpoint():
                problems.append(f"its checkpoint {row.checkpoint} is not the user codec's pin the plan records: "
                                f"{pinned_codec.checkpoint()}")
            if row.status == "ok" and label.get("source_sha256") != pinned_codec.source_sha256:
                problems.append(f"it was made by user codec source {label.get('source_sha256')}, the plan pins "
                                f"{pinned_codec.source_sha256}")
            if row.status == "ok" and label.get("declaration_sha256") != pinned_codec.declaration_sha256:
                problems.append(f"it was made by user codec declaration {label.get('declaration_sha256')}, the plan "
                                f"pins {pinned_codec.declaration_sha256}")
            # The whole pin (requirements and programs too), recorded by rows made since codecs re-pinned
            # within a run (run --add) could be; an older row is held to the parts above.
            if row.status == "ok" and "pin_sha256" in label and label["pin_sha256"] != pinned_codec.sha256:
                problems.append(f"it was made by user codec pin {label['pin_sha256']}, the plan pins "
                                f"{pinned_codec.sha256} (the codec was added again since this row was made)")
        elif row.registry.startswith("user-"):
            problems.append(f"its registry {row.registry!r} names a user codec the plan does not pin")
        problems += self.device_problems(row)
        if self.user_pins is not None and self.weights == "user" and row.checkpoint:
            identity = {p.codec: p.checkpoint for p in self.user_pins}.get(row.codec)
            if row.checkpoint != identity:
                problems.append(f"its checkpoint {row.checkpoint} is not the user pin the plan records for "
                                f"{row.codec}: {identity}")
        return problems

    def device_problems(self, row: Row) -> list[str]:
        """How a row's devices disagree with the plan's: requested, where it ran (the plan's device for a
        torch family, the CPU for any other), the device its worker reported, and where each metric was
        computed. Nothing for a plan before version 7; a row before version 7 (8 for its metrics) was
        computed on the CPU, which a plan on the CPU agrees with (an old run resumed)."""
        if self.device is None or self.metric_device is None:
            return []
        problems = self._metric_device_problems(row)
        if row.device is None:
            if row.version < 7 and self.device == "cpu":
                return problems
            return [f"it records no device; the plan's is {self.device}", *problems]
        where = row.device
        family = FAMILIES.get(row.family)
        applies = family.torch if family is not None else where.get("applied")
        expected = self.device if applies else "cpu"
        if where.get("requested") != self.device:
            problems.append(f"its device was requested as {where.get('requested')!r}, the plan's is {self.device}")
        if where.get("applied") is not applies or where.get("device") != expected:
            problems.append(f"it ran on {where.get('device')!r} (applied {where.get('applied')!r}); a "
                            f"{'torch' if applies else 'CPU-only'} family of this plan runs on {expected}")
        info = where.get("info")
        if info is not None:
            try:
                ran = DeviceInfo.from_dict(info, "device.info").device
            except DeviceError as exc:
                problems.append(str(exc))
            else:
                if ran != expected:
                    problems.append(f"its encode worker reported device {ran}, not {expected}")
        return problems

    def _metric_device_problems(self, row: Row) -> list[str]:
        assert self.metric_device is not None
        expected = devices_of(self.metrics, self.metric_device) if row.metrics else {}
        recorded = row.metric_devices
        if recorded is None:
            if row.version >= 8:
                return ["it records no metric devices"]
            recorded = devices_of(self.metrics, "cpu") if row.metrics else {}  # every metric ran on the CPU then
        if recorded == expected:
            return []
        moved = sorted(name for name in expected.keys() | recorded.keys() if expected.get(name) != recorded.get(name))
        return [f"its metrics {', '.join(moved)} were computed on "
                f"{', '.join(str(recorded.get(name)) for name in moved)}; the plan's metric device {self.metric_device} "
                f"puts them on {', '.join(str(expected.get(name)) for name in moved)}"]

    @property
    def sha256(self) -> str:
        return sha256_json(self.to_dict())


@dataclass(frozen=True)
class RunRecord:
    version: int
    codecarena: str
    command: list[str]
    created_at: str
    git: dict[str, Any]
    environment: dict[str, Any]  # python, executable, os, cpu, cpu_count, memory_bytes, packages
    metrics: list[dict[str, Any]]  # each metric's declaration (docs/metrics.md)
    runtimes: dict[str, Any]  # registry id -> runtime record
    # Files of an --input folder that could not be read as audio: {file, reason}; None before version 3.
    skipped_inputs: list[dict[str, Any]] | None
    # Each earlier invocation into this directory, oldest first: {command, created_at, plan_sha256,
    # codecs, and the pins of its user codecs (user_codecs; absent from entries written before a user
    # codec could be pinned again within a run)}; None before version 4.
    history: list[dict[str, Any]] | None
    plan: Plan
    plan_sha256: str
    execution: dict[str, Any]  # executor, workers, rows_computed, rows_resumed, rows_wall_s
    finished: bool

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "plan": self.plan.to_dict()}

    def as_history(self) -> list[dict[str, Any]]:
        """This record's history with this record's own invocation appended: what a record that
        replaces it keeps."""
        return [*(self.history or []), {"command": self.command, "created_at": self.created_at,
                                        "plan_sha256": self.plan_sha256,
                                        "codecs": [c.codec for c in self.plan.codecs],
                                        "user_codecs": [c.to_dict() for c in self.plan.user_codecs or ()]}]


def on_the_cpu_if_older(plan: Plan) -> Plan:
    """A plan from before run.json version 7 names no device: every codec and metric ran on the CPU
    then, so it is the same plan as one that says so (a resume or --add of an old run on the CPU, a
    refusal naming the device on another). Nothing else of an older plan is rewritten: the runtime
    entries, [family, registry, interpreter] or with "external", have the same form in versions 6 and 7."""
    if plan.device is None and plan.metric_device is None:
        return replace(plan, device="cpu", metric_device="cpu")
    return plan


def plan_from_dict(data: dict[str, Any]) -> Plan:
    """A current plan from its JSON form (what the pipeline builds and a version 7 to 10 run.json holds)."""
    if "legacy_limits" in data:
        raise SchemaError("plan: unexpected key 'legacy_limits'")
    plan = from_dict(Plan, {"file_sets": None, "warm_sample": None, **_library_pins(data, RUN_VERSION),
                            "legacy_limits": None}, "plan")
    if plan.user_codecs is None or len({c.name for c in plan.user_codecs}) != len(plan.user_codecs):
        raise SchemaError("plan.user_codecs: expected a list naming each user codec once")
    if plan.references is None or plan.user_pins is None:
        raise SchemaError("plan: references and user_pins must be lists")
    if plan.device is None or plan.metric_device is None:
        raise SchemaError("plan: device and metric_device must be devices")
    return plan


def _older_plan(data: dict[str, Any], legacy: dict[str, Any] | None) -> Plan:
    """A plan of a record before version 5, which pinned neither references nor user checkpoints."""
    unexpected = [key for key in (*_V5_PLAN_FIELDS, "user_codecs", *_V7_PLAN_FIELDS, "legacy_limits", "file_sets",
                                  "warm_sample") if key in data]
    if unexpected:
        raise SchemaError(f"plan: unexpected keys {unexpected}")
    return from_dict(Plan, {**data, **dict.fromkeys((*_V5_PLAN_FIELDS, "user_codecs", *_V7_PLAN_FIELDS, "file_sets",
                                                     "warm_sample")),
                            "legacy_limits": legacy}, "plan")


def parse_run_record(data: Any) -> RunRecord:
    if not isinstance(data, dict):
        raise SchemaError("run.json: expected an object")
    version = data.get("version")
    if "plan" in data:
        data = {**data, "plan": _library_pins(data["plan"], version)}
    if version in (1, 2) and "skipped_inputs" not in data:
        data = {**data, "skipped_inputs": None}
    if version in (1, 2, 3) and "history" not in data:
        data = {**data, "history": None}
    if version == 1 and isinstance(data.get("plan"), dict):
        plan = dict(data["plan"])
        legacy = {key: plan.pop(key) for key in _V1_PLAN_LIMITS if key in plan}
        data = {**data, "plan": _older_plan(plan, legacy or None)}
    elif version in (2, 3, 4) and isinstance(data.get("plan"), dict):
        data = {**data, "plan": _older_plan(data["plan"], None)}
    elif version in (5, 6) and isinstance(data.get("plan"), dict):
        added = (("user_codecs",) if version == 5 else ()) + _V7_PLAN_FIELDS + ("file_sets", "warm_sample")
        unexpected = [key for key in added if key in data["plan"]]
        if unexpected:
            raise SchemaError(f"plan: unexpected keys {unexpected} in a version {version} record")
        plan = from_dict(Plan, {**data["plan"], **dict.fromkeys(added), "legacy_limits": None}, "plan")
        if plan.references is None or plan.user_pins is None:
            raise SchemaError("plan: references and user_pins must be lists")
        if version == 6 and (plan.user_codecs is None or len({c.name for c in plan.user_codecs}) != len(plan.user_codecs)):
            raise SchemaError("plan.user_codecs: expected a list naming each user codec once")
        data = {**data, "plan": plan}
    elif version in (7, 8, 9) and isinstance(data.get("plan"), dict):
        unexpected = [key for key in (("file_sets",) if version == 7 else ()) + ("warm_sample",) if key in data["plan"]]
        if unexpected:
            raise SchemaError(f"plan: unexpected keys {unexpected} in a version {version} record")
        data = {**data, "plan": plan_from_dict(data["plan"])}
    elif version == RUN_VERSION and isinstance(data.get("plan"), dict):
        data = {**data, "plan": plan_from_dict(data["plan"])}
    else:
        raise SchemaError(f"run.json version {version!r}, expected 1 to {RUN_VERSION}")
    return from_dict(RunRecord, data, "run")


class RunLoadError(ValueError):
    """A run directory whose run.json or rows.jsonl cannot be read; names the file and the problem."""


def read_record(run: RunDir) -> RunRecord:
    """The run's run.json; RunLoadError (one line naming the file) when it cannot be read or parsed."""
    path = run.run_json
    try:
        return parse_run_record(read_json(path))
    except JSONFileError as exc:
        raise RunLoadError(str(exc)) from None
    except (SchemaError, ValueError) as exc:
        raise RunLoadError(f"{path}: not a valid run record ({exc})") from None
