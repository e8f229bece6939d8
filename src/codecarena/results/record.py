"""`run.json` as a typed, strictly parsed record, and the one loader of a run directory.

Audit, leaderboard, compare and report all read a run through `load_run`, so they agree on what a
valid run is: run.json parses into a `RunRecord` (exact keys, types, a known version), rows.jsonl into
rows in plan order, summary.json into its dict (the audit re-derives it).

Version 2 moved the stage limits out of the plan (rows record them); a version 1 record is read with
those three plan keys kept in `Plan.legacy_limits`, and is otherwise the same. Version 3 added
`skipped_inputs`; an older record reads with None there (not recorded, which is not "none skipped").
Version 4 added `history`, the earlier invocations whose record this one replaced (resumed or
extended with --add); an older record reads with None there (not recorded).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from codecarena.files import JSONFileError, read_json, sha256_json
from codecarena.results.schema import Row, SchemaError, from_dict
from codecarena.results.store import StoreError, load_rows
from codecarena.rundir import RunDir

RUN_VERSION = 4
_V1_PLAN_LIMITS = ("memory_limit_bytes", "guard_poll_s", "stage_timeout_s")


@dataclass(frozen=True)
class PlanCodec:
    codec: str  # canonical spec
    config: dict[str, Any]  # every option with the value that ran


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
    legacy_limits: dict[str, Any] | None = None  # version 1 only: the limits the plan held then

    def __post_init__(self) -> None:
        if any(len(u) != 2 for u in self.utterances):
            raise SchemaError("plan.utterances: expected [id, sha256] pairs")
        if self.mode not in ("cold", "warm"):
            raise SchemaError(f"plan.mode {self.mode!r} is not cold/warm")

    def keys(self) -> list[tuple[str, str]]:
        """(codec, utterance) of every planned row, in plan order."""
        return [(c.codec, u[0]) for c in self.codecs for u in self.utterances]

    def to_dict(self) -> dict[str, Any]:
        """The plan as run.json holds it (a version 1 plan with its limits back at the top level)."""
        data = asdict(self)
        legacy = data.pop("legacy_limits")
        return {**data, **(legacy or {})}

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
    # codecs}; None before version 4.
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
                                        "codecs": [c.codec for c in self.plan.codecs]}]


def plan_from_dict(data: dict[str, Any]) -> Plan:
    """A version 2 plan from its JSON form (what the pipeline builds and run.json holds)."""
    if "legacy_limits" in data:
        raise SchemaError("plan: unexpected key 'legacy_limits'")
    return from_dict(Plan, {**data, "legacy_limits": None}, "plan")


def parse_run_record(data: Any) -> RunRecord:
    if not isinstance(data, dict):
        raise SchemaError("run.json: expected an object")
    version = data.get("version")
    if version in (1, 2) and "skipped_inputs" not in data:
        data = {**data, "skipped_inputs": None}
    if version in (1, 2, 3) and "history" not in data:
        data = {**data, "history": None}
    if version == 1 and isinstance(data.get("plan"), dict):
        plan = dict(data["plan"])
        legacy = {key: plan.pop(key) for key in _V1_PLAN_LIMITS if key in plan}
        data = {**data, "plan": from_dict(Plan, {**plan, "legacy_limits": legacy or None}, "plan")}
    elif version in (2, 3, RUN_VERSION) and isinstance(data.get("plan"), dict):
        data = {**data, "plan": plan_from_dict(data["plan"])}
    else:
        raise SchemaError(f"run.json version {version!r}, expected 1 to {RUN_VERSION}")
    return from_dict(RunRecord, data, "run")


@dataclass(frozen=True)
class LoadedRun:
    dir: RunDir
    record: RunRecord
    rows: list[Row]  # in plan order
    torn: bool  # a torn final line of rows.jsonl (an interrupted append) was dropped
    summary: dict[str, Any] | None  # summary.json, None when it is missing

    @property
    def path(self) -> Path:
        return self.dir.root


class RunLoadError(ValueError):
    """A run directory whose run.json or rows.jsonl cannot be read; names the file and the problem."""


def read_record(run_dir: Path) -> RunRecord:
    path = RunDir(run_dir).run_json
    try:
        return parse_run_record(read_json(path))
    except JSONFileError as exc:
        raise RunLoadError(str(exc)) from None
    except (SchemaError, ValueError) as exc:
        raise RunLoadError(f"{path}: not a valid run record ({exc})") from None


def load_run(run_dir: Path) -> LoadedRun:
    """The run's record, rows (plan order) and summary; RunLoadError when run.json or a row is invalid.
    A missing summary.json is None (an unfinished run has none); an unreadable one is an error."""
    run = RunDir(run_dir)
    if not run.root.is_dir():
        raise RunLoadError(f"{run_dir}: not a run directory")
    record = read_record(run.root)
    try:
        rows, torn = load_rows(run.root, record.plan.keys())
    except StoreError as exc:
        raise RunLoadError(str(exc)) from None
    summary = None
    if run.summary.exists():
        try:
            summary = read_json(run.summary)
        except JSONFileError as exc:
            raise RunLoadError(str(exc)) from None
    return LoadedRun(run, record, rows, torn, summary)
