"""The run as one value: `RunPlan`, everything a run follows, made once and handed whole to every
part of the run (`execute`, the executors, each row).

A `RunPlan` holds the run record this invocation starts run.json with, whose `plan` (results/record.py)
is the one home of everything that determines the rows (set, codecs, weights, variant, devices,
mode and samples, metrics, runtimes, references and pins, the condition sets); beside it only what does
not: the utterances' files and the folders of the condition sets, the run directory (`RunDir`, which names every file of the run), the stage limits
(rows record them), the interpreter of families without a runtime record, what rows of an external
runtime record, who runs the rows and whether this invocation adds codec configurations to a run.
`pipeline/prepare.py` makes one from what the user selected; `assemble` makes one from values
already resolved (a Python caller, the tests).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from codecarena import variants
from codecarena.arena import ARENA_RATE
from codecarena.conditions.sets import FileSet
from codecarena.datasets import EvalSet
from codecarena.machine import describe
from codecarena.references import planned_reference_sha256
from codecarena.registry import user_pins, user_units
from codecarena.registry.catalog import FAMILIES
from codecarena.results.record import RUN_VERSION, Plan, PlanFileSet, RunRecord, plan_from_dict
from codecarena.rundir import RunDir
from codecarena.runtime.external import ExternalRuntime
from codecarena.runtime.limits import StageLimits
from codecarena.specs import CodecSpec, parse_configuration


class RunError(RuntimeError):
    """The run cannot start or continue; the message says why."""


@dataclass(frozen=True)
class Execution:
    """Who runs the rows. Not part of the plan: every executor makes the same rows."""
    executor: str = "local"  # "local" (this machine) or "ray" (actors on a Ray cluster)
    workers: int | None = None  # rows in flight at once; None: one per CPU (core of this machine, or of the cluster)
    ray_address: str | None = None  # a running Ray cluster; None: a private local one
    # Cold stages in a new interpreter each (--fresh-interpreter), not forked from their runtime's template.
    fresh_interpreter: bool = False


@dataclass(frozen=True)
class RunPlan:
    record: RunRecord  # run.json as this invocation starts it (not finished): the plan, the invocation
    evalset: EvalSet  # the utterances, with their files
    out: Path  # the run directory as it was named (what messages to the user show)
    run: RunDir  # the same directory: every path inside the run
    limits: StageLimits  # recorded per row, not part of the plan
    python: str = sys.executable  # the interpreter of a family the plan names no runtime for
    external: tuple[ExternalRuntime, ...] = ()  # what the rows of each external-runtime family record
    execution: Execution = field(default_factory=Execution)
    add: bool = False  # the codec configurations join those of the run already in `out`
    # The codec configurations of the run already in the directory, which this invocation continues
    # (as `prepare` found them; `execute` checks the directory again under its lock).
    continued: tuple[str, ...] = ()
    # Where each --noise-dir and --rir-dir set was read from: (kind, name, folder); the plan pins the files.
    set_folders: tuple[tuple[str, str, Path], ...] = ()
    # The user codecs pinned anew (`codec add` again) since that run, which --add takes up: their rows
    # are computed again with the new pin, every other row is kept.
    repinned: tuple[str, ...] = ()

    @property
    def plan(self) -> Plan:
        return self.record.plan

    @cached_property
    def codecs(self) -> tuple[CodecSpec, ...]:
        """The plan's codec configurations, in order."""
        return tuple(parse_configuration(c.codec) for c in self.plan.codecs)

    @cached_property
    def file_sets(self) -> tuple[FileSet, ...]:
        """The sets the plan's conditions draw from, as the plan pins them."""
        return tuple(found.as_set() for found in self.plan.file_sets or ())

    @property
    def variant(self) -> str:
        """The numerical variant's name ("" = upstream numerics)."""
        return str(self.plan.variant["name"])

    @property
    def device(self) -> str:
        """--device: where torch families run."""
        assert self.plan.device is not None  # a current plan always names it (plan_from_dict)
        return self.plan.device

    @property
    def metric_device(self) -> str:
        """--metric-device: where learned metrics run."""
        assert self.plan.metric_device is not None
        return self.plan.metric_device

    def runtime_of(self, family: str) -> tuple[str, str]:
        """(registry id, interpreter) of a family's runtime; ("", the run's python) for one the plan names none for."""
        return _runtime_of(self.plan.runtimes, family, self.python)

    def stage_device(self, family: str) -> str:
        """The device a family's stages run on: the run's for a torch family, the CPU for any other."""
        return self.device if FAMILIES[family].torch else "cpu"

    @classmethod
    def start(cls, plan: Plan, evalset: EvalSet, out: Path, limits: StageLimits, *,
              invocation: Mapping[str, Any] | None = None, python: str = sys.executable,
              external: Sequence[ExternalRuntime] = (), execution: Execution = Execution(),
              add: bool = False, set_folders: Sequence[tuple[str, str, Path]] = ()) -> RunPlan:
        """The run of `plan` into `out` (the one place a run's directory becomes its RunDir), its record
        as run.json starts: `invocation` (codecarena, git, command, created_at, environment, the metrics'
        declarations and the runtime records; default: this machine and process, no metric, no runtime
        record), the plan and the inputs skipped; no history and no execution yet (`execute` adds them,
        under the run's lock)."""
        given = dict(invocation) if invocation is not None else {**describe([]), "metrics": [], "runtimes": {}}
        record = RunRecord(**{**given, "version": RUN_VERSION}, plan=plan, plan_sha256=plan.sha256, history=[],
                           skipped_inputs=[{"file": name, "reason": reason} for name, reason in evalset.skipped],
                           execution={}, finished=False)
        return cls(record=record, evalset=evalset, out=out, run=RunDir(out), limits=limits, python=python,
                   external=tuple(external), execution=execution, add=add, set_folders=tuple(set_folders))

    def with_codecs(self, codecs: Sequence[CodecSpec], runtimes: Iterable[Sequence[str]]) -> RunPlan:
        """The same run with other codec configurations and runtimes (--add): what the plan derives from
        them is derived again, every other part of it stays."""
        plan = plan_from_dict({**self.plan.to_dict(), **_codec_parts(codecs, runtimes, self.plan.weights, self.python)})
        return replace(self, record=replace(self.record, plan=plan, plan_sha256=plan.sha256))


def plan_of(evalset: EvalSet, codecs: Sequence[CodecSpec], *, weights: str = "real", variant: str = "",
            warm_repeats: int = 2, device: str = "cpu", metric_device: str = "cpu", mode: str = "cold",
            cold_sample: int = 1, replay_sample: int | None = None, warm_sample: int | None = None,
            metrics: Iterable[str] = (), runtimes: Iterable[Sequence[str]] = (), asr_models: Iterable[tuple[str, str]] = (),
            file_sets: Sequence[FileSet] = (), python: str = sys.executable) -> Plan:
    """What determines the rows; a rerun into the same directory must have the same plan. Resource
    limits are not in it: they decide whether a stage may finish, not what it computes (rows record them)."""
    return plan_from_dict({
        "set": evalset.name,
        "manifest_sha256": evalset.manifest_sha256,
        "utterances": [[u.id, u.sha256] for u in evalset.utterances],
        "arena_rate": ARENA_RATE,
        "weights": weights,
        "variant": variants.provenance(variant),
        "warm_repeats": warm_repeats,
        "device": device,
        "metric_device": metric_device,
        "mode": mode,
        "cold_sample": cold_sample if mode == "warm" else None,
        "replay_sample": replay_sample,
        "metrics": list(metrics),
        # Only a plan whose warm sample leaves out a row that would repeat has the key: every other plan
        # determines the rows of an older plan, whose every cold row repeated, and hashes as it did.
        **({"warm_sample": warm_sample}
           if warm_sample is not None and warm_sample < _repeating_rows(evalset, warm_repeats, mode, cold_sample)
           else {}),
        "asr_models": [list(pair) for pair in asr_models],
        "references": [{"id": u.id, "sha256": planned_reference_sha256(u), "language": u.language,
                        "speaker": u.speaker, "transcript": u.transcript, "critical": [list(c) for c in u.critical]}
                       for u in evalset.utterances],
        **_codec_parts(codecs, runtimes, weights, python),
        # Only a plan whose conditions draw from sets has the key: every other plan hashes as before.
        **({"file_sets": [PlanFileSet.of(found) for found in file_sets]} if file_sets else {}),
    })


def _repeating_rows(evalset: EvalSet, warm_repeats: int, mode: str, cold_sample: int) -> int:
    """How many rows of each configuration would repeat the codec call with every row in the warm sample:
    those that run cold (all in cold mode, the cold sample in warm mode), none without repeats."""
    if warm_repeats == 0:
        return 0
    return len(evalset.utterances) if mode == "cold" else min(cold_sample, len(evalset.utterances))


def _codec_parts(codecs: Sequence[CodecSpec], runtimes: Iterable[Sequence[str]], weights: str,
                 python: str) -> dict[str, Any]:
    """The parts of a plan that follow from its codec configurations and their runtimes."""
    listed = [list(r) for r in runtimes]

    def pinned(spec: CodecSpec) -> dict[str, str]:
        return user_pin_identity(spec, _runtime_of(listed, spec.family, python)[0])

    return {
        "codecs": [{"codec": s.canonical, "config": s.config_dict()} for s in codecs],
        "runtimes": listed,
        "user_pins": [{"codec": s.canonical, "checkpoint": pinned(s)} for s in codecs] if weights == "user" else [],
        "user_codecs": [user_units.load(family).identity() for family in dict.fromkeys(s.family for s in codecs)
                        if FAMILIES[family].origin == "user"],
    }


def _runtime_of(runtimes: Iterable[Sequence[str]], family: str, python: str) -> tuple[str, str]:
    for fam, registry_id, interpreter, *_ in runtimes:
        if fam == family:
            return registry_id, interpreter
    return "", python


def user_pin_identity(spec: CodecSpec, registry_id: str) -> dict[str, str]:
    """The checkpoint identity the payloads of a configuration record with --weights user: the user's
    pin as it is now (the plan holds it, so a pin changed between invocations is a different plan)."""
    pin = user_pins.find(spec.family, spec.config)
    if pin is None:
        raise RunError(f"{spec.canonical}: --weights user needs a user pin (codecarena registry pin "
                       f"{spec.family}:{spec.config} --file PATH)")
    return pin.identity(registry_id)


def default_directory(evalset: EvalSet, plan: Plan) -> Path:
    """runs/<set>-<hash of the plan>: rerunning the same command resumes, another never overwrites it."""
    name = evalset.name.replace(":", "-").replace("/", "_")
    return Path("runs") / f"{name}-{plan.sha256[:10]}"


def assemble(evalset: EvalSet, codecs: Sequence[CodecSpec], out: Path, limits: StageLimits, *,
             invocation: Mapping[str, Any] | None = None, python: str = sys.executable,
             external: Sequence[ExternalRuntime] = (), execution: Execution = Execution(), add: bool = False,
             set_folders: Sequence[tuple[str, str, Path]] = (), **plan: Any) -> RunPlan:
    """A RunPlan of values already resolved (`plan` takes plan_of's keywords); nothing is checked
    against this machine (pipeline/prepare.py does that from a user's selection)."""
    return RunPlan.start(plan_of(evalset, codecs, python=python, **plan), evalset, out, limits, invocation=invocation,
                         python=python, external=external, execution=execution, add=add, set_folders=set_folders)
