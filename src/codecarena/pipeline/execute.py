"""Executing a run: lock its directory, continue what it holds (pipeline/resume.py), prepare the
references, hand the rows still to compute to an executor, append each row as it comes, then write
the summary and mark the run finished.

Which executor runs the rows (in this process, a local process pool, Ray) does not change them; it
never writes rows.jsonl itself. Sample membership (cold rows of a warm run, cold rows that repeat the
codec call for the warm RTF, replayed rows) depends only on a row's index within its codec
configuration, so a resumed run samples the same rows.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any, Protocol

from codecarena.pipeline import condition_plan as selected
from codecarena.conditions.make import babble_talkers
from codecarena.conditions.noise import Source
from codecarena.datasets import Utterance
from codecarena.diskspace import DiskFullError, free_bytes, row_bytes
from codecarena.files import copy_verified, sha256_file, write_json
from codecarena.metrics.guarded import THREAD_SETTINGS
from codecarena.plural import counted
from codecarena.pipeline.plan import RunError, RunPlan
from codecarena.pipeline.resume import changed_binaries, follow, kept_rows
from codecarena.pipeline.row import Task
from codecarena.references import Reference, ReferenceCopyError, prepare_reference
from codecarena.results import ledger, store
from codecarena.results.schema import Row
from codecarena.results.summary import summarize
from codecarena.rundir import RunLockError


class Executor(Protocol):
    """Runs tasks and yields their rows in any order; it never writes rows.jsonl itself."""

    def describe(self) -> dict[str, Any]: ...

    def rows(self, tasks: list[Task], plan: RunPlan) -> Generator[Row, None, None]: ...


def plan_tasks(plan: RunPlan, skip: Iterable[tuple[str, str]],
               reference: Callable[[Utterance], Reference]) -> list[Task]:
    """The rows still to compute, in plan order. Sample membership depends only on the row's index
    within its codec configuration, so a resumed run samples the same rows. A row whose condition draws
    from other utterances (a babble) gets their references too."""
    done = set(skip)
    mode, cold_sample, replay_sample = plan.plan.mode, plan.plan.cold_sample or 0, plan.plan.replay_sample
    warm_sample = plan.plan.warm_sample
    by_id = {u.id: u for u in plan.evalset.utterances}
    candidates = [Source(u.id, u.speaker) for u in plan.evalset.utterances]
    tasks = []
    for spec in plan.codecs:
        condition = spec.conditioned
        for index, utt in enumerate(plan.evalset.utterances):
            if (spec.canonical, utt.id) in done:
                continue
            row_mode = "warm" if mode == "warm" and index >= cold_sample else "cold"
            replay = replay_sample is None or index < replay_sample
            repeats = row_mode == "cold" and (warm_sample is None or index < warm_sample)
            talkers = (babble_talkers(condition, utt.id, utt.speaker, candidates)
                       if condition is not None and condition.noise == "babble" else [])
            tasks.append(Task(spec, reference(utt), row_mode, replay, repeats,
                              tuple(reference(by_id[t]) for t in talkers)))
    return tasks


def copy_set_files(plan: RunPlan, tasks: Iterable[Task]) -> None:
    """The run's copy of every --noise-dir and --rir-dir file a row to compute draws, checked against the
    plan's pin (RunError when a file changed since the run was prepared)."""
    folders = {(kind, name): folder for kind, name, folder in plan.set_folders}
    for task in tasks:
        for kind, name, file_name in selected.used_files(task.spec, task.ref.utterance.id, task.ref.num_samples,
                                                          plan.file_sets):
            target = plan.run.set_file(kind, name, file_name)
            pinned = next(f.sha256 for s in plan.file_sets if (s.kind, s.name) == (kind, name) for f in s.files
                          if f.name == file_name)
            if target.is_file() and sha256_file(target) == pinned:
                continue
            if (kind, name) not in folders:
                raise RunError(f"{plan.run.relative(target)}: the run's copy is missing and no {kind} folder named "
                               f"{name} was given (rerun with the same --{kind}-dir)")
            target.parent.mkdir(parents=True, exist_ok=True)
            if not copy_verified(folders[(kind, name)] / file_name, target, pinned):
                raise RunError(f"{folders[(kind, name)] / file_name}: sha256 is not the plan's {pinned[:12]} "
                               "(did it change since the run started?)")


def execute(plan: RunPlan, executor: Executor, on_row: Callable[[Row, bool], None] | None = None) -> list[Row]:
    """Run (or resume) every codec x utterance row of `plan` into its run directory; return the rows in
    plan order. With plan.add, its codec configurations join those of the run already there (every
    other part of the plan must be the same), and the run covers all of them."""
    plan.run.root.mkdir(parents=True, exist_ok=True)
    try:
        with plan.run.locked():
            return _execute_locked(plan, executor, on_row)
    except RunLockError as exc:
        raise RunError(str(exc)) from None


def _execute_locked(plan: RunPlan, executor: Executor, on_row: Callable[[Row, bool], None] | None) -> list[Row]:
    run = plan.run
    plan, earlier = follow(plan)
    changed = changed_binaries(earlier.runtimes, plan.record.runtimes, plan.repinned) if earlier is not None else ""
    if changed:
        raise RunError(f"{run.root}: {changed} since the run started, so its rows came from another "
                       f"binary; use another --out directory")
    # run.json is rewritten here: the invocations before this one stay in its history, so an --add
    # keeps the plan it extended (by hash and codecs) and the command that made it. The executor is
    # not part of the plan: any executor must produce the same rows.
    record = dataclasses.replace(plan.record, history=earlier.as_history() if earlier is not None else [],
                                 execution=executor.describe())
    write_json(run.run_json, record.to_dict())

    existing, _torn = store.load_rows(run, plan.plan.keys())
    kept = kept_rows(existing, plan)
    # Rewriting drops failed rows (they are retried), a torn final line, and rows whose files changed.
    store.rewrite_rows(run, list(kept.values()))
    if on_row:
        for row in kept.values():
            on_row(row, True)

    tasks = plan_tasks(plan, kept, _references(plan))
    copy_set_files(plan, tasks)
    needed = [row_bytes(task.ref.num_samples) for task in tasks]
    if needed and free_bytes(run.root) < max(needed):
        raise DiskFullError(run.root, sum(needed))
    start = time.perf_counter()
    done: dict[tuple[str, str], Row] = dict(kept)
    rows = executor.rows(tasks, plan)
    try:
        for row in rows:
            # A row that failed because the disk filled up is not the codec's failure: stop, keep
            # the completed rows, and let the rerun compute it.
            if row.status == "failed" and free_bytes(run.root) < row_bytes(row.num_samples):
                raise DiskFullError(run.root, sum(needed[len(done) - len(kept):]))
            store.append_row(run, row)
            done[row.key] = row
            if on_row:
                on_row(row, False)
    finally:
        rows.close()  # stops the executor's remaining work when this loop ends early
    rows_wall = time.perf_counter() - start
    wanted = [(s.canonical, u.id) for s in plan.codecs for u in plan.evalset.utterances]
    missing = set(wanted) - done.keys()
    if missing:
        raise RunError(f"{run.root}: the executor returned no row for {counted(len(missing), 'task')}, "
                       f"e.g. {sorted(missing)[0]}")
    in_order = [done[key] for key in wanted]
    write_json(run.summary, {**summarize(in_order), "ledger": ledger.build(in_order, run)})
    execution = {**executor.describe(), "rows_computed": len(tasks), "rows_resumed": len(kept),
                 "rows_wall_s": rows_wall, **({"scoring_threads": THREAD_SETTINGS} if plan.plan.metrics else {})}
    write_json(run.run_json, dataclasses.replace(record, execution=execution, finished=True).to_dict())
    return in_order


def _references(plan: RunPlan) -> Callable[[Utterance], Reference]:
    """The run's copy of each utterance's reference, made once, checked against the sha256 the plan pins."""
    references: dict[str, Reference] = {}
    pinned = {r.id: r.sha256 for r in plan.plan.references or ()}

    def reference(utt: Utterance) -> Reference:
        if utt.id not in references:
            try:
                ref = prepare_reference(utt, plan.run)
            except ReferenceCopyError as exc:
                raise RunError(str(exc)) from None
            if ref.sha256 != pinned[utt.id]:
                raise RunError(f"{ref.path}: sha256 {ref.sha256} is not the plan's {pinned[utt.id]} "
                               f"(did {utt.path} change during the run?)")
            references[utt.id] = ref
        return references[utt.id]

    return reference
