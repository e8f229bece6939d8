"""The local executor: rows in this process (1 worker) or in a pool of local processes.

Each pool process holds a RowRunner, so in warm mode it keeps one persistent codec worker per
runtime and its own metric models for every row it is given. The pool uses `spawn`: the harness
may already hold threads and loaded libraries (rich, ONNX Runtime) that are not fork-safe.

SIGINT and SIGTERM stop a pool run: rows not started are dropped at once, running rows get
INTERRUPT_GRACE_S to finish (and are recorded if they do; a second signal ends the wait), then the
pool processes and every codec process they started are killed, and the signal is re-raised for
the caller (the command line exits 130/143). Pool processes ignore SIGINT, so a terminal's Ctrl-C,
which reaches the whole foreground process group, is handled once, here. On Linux every pool
process also dies with the harness, even when the harness is killed with SIGKILL.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.synchronize import Event as EventType
from types import FrameType
from typing import Any

import psutil

from codecarena.executors.runner import RowRunner
from codecarena.pipeline.plan import RunPlan
from codecarena.pipeline.row import Task, failed_row
from codecarena.results.schema import Row
from codecarena.runtime.guard import _kill_group, die_with_parent

# How long running rows may take to finish after SIGINT/SIGTERM before they are killed.
INTERRUPT_GRACE_S = 5.0
# How often the harness looks at its signal flag while it waits for rows.
_POLL_S = 0.2
# A pool process died (not a codec worker: those fail their own row). Every row the pool had not
# finished fails with this reason; a rerun computes them.
_POOL_DIED = "a local executor process died before the row finished"


def default_workers() -> int:
    return len(os.sched_getaffinity(0))


_RUNNER: RowRunner | None = None
_STOP: EventType | None = None


class _NotStarted(Exception):
    """A task the pool had already queued when the run was interrupted; it never ran."""


def _init(plan: RunPlan, harness_pid: int, stop: EventType) -> None:
    global _RUNNER, _STOP
    die_with_parent(harness_pid)
    # The harness decides what an interrupt stops (see the module docstring).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _RUNNER, _STOP = RowRunner(plan), stop


def _run(task: Task) -> Row:
    assert _RUNNER is not None and _STOP is not None
    if _STOP.is_set():
        raise _NotStarted
    return _RUNNER.run(task)


def _reason(exc: BaseException) -> str:
    return f"row runner failed: {type(exc).__name__}: {exc}".splitlines()[0]


class LocalExecutor:
    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or default_workers()
        if self.workers < 1:
            raise ValueError("--workers must be at least 1")

    def describe(self) -> dict[str, Any]:
        return {"executor": "local", "workers": self.workers,
                "processes": "this process" if self.workers == 1 else "spawned pool"}

    def rows(self, tasks: list[Task], plan: RunPlan) -> Iterator[Row]:
        if not tasks:
            return
        if self.workers == 1:
            runner = RowRunner(plan)
            try:
                for task in tasks:
                    try:
                        row = runner.run(task)
                    except Exception as exc:  # e.g. a runtime's interpreter that cannot be started
                        row = failed_row(task, plan, _reason(exc))
                    yield row
            finally:
                runner.close()
            return
        yield from self._pool_rows(tasks, plan)

    def _pool_rows(self, tasks: list[Task], plan: RunPlan) -> Iterator[Row]:
        context = multiprocessing.get_context("spawn")
        # Tasks the pool has already queued for a process cannot be cancelled; this flag makes them
        # return at once, unstarted. (Future.cancel() is not used: on Python 3.11 a cancelled future
        # crashes the pool's manager thread when a pool process is then killed.)
        stop = context.Event()
        pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=_init,
                                   initargs=(plan, os.getpid(), stop))
        # Only a few tasks at a time go to the pool, so that an interrupt has few to stop.
        queue = collections.deque(tasks)
        pending: dict[Future[Row], Task] = {}
        with _Interrupts() as interrupts:
            try:
                while (queue or pending) and not interrupts.signums:
                    while queue and len(pending) < 2 * self.workers:
                        task = queue.popleft()
                        try:
                            pending[pool.submit(_run, task)] = task
                        except BrokenProcessPool:
                            yield failed_row(task, plan, _POOL_DIED)
                    yield from _collect(pending, plan, _POLL_S)
                # Done, or interrupted: nothing more starts, and rows still running get the grace.
                stop.set()
                deadline = time.monotonic() + INTERRUPT_GRACE_S
                while pending and len(interrupts.signums) == 1 and time.monotonic() < deadline:
                    yield from _collect(pending, plan, min(_POLL_S, deadline - time.monotonic()))
            finally:
                # Rows still running after an interrupt, or when the caller stopped reading, are not wanted.
                if pending:
                    stop.set()
                    _kill_pool(pool)
                pool.shutdown(wait=True)
        if interrupts.signums:
            # The caller's own handler, restored above, decides what the signal means.
            signal.raise_signal(interrupts.signums[0])


class _Interrupts:
    """While open, SIGINT and SIGTERM are recorded instead of acted on, so the pool can stop in
    order; closing restores the previous handlers. Only the main thread may set handlers: elsewhere
    nothing is recorded and the signals act as before. An ignored signal stays ignored."""

    def __init__(self) -> None:
        self.signums: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(signum) not in (signal.SIG_IGN, None):
                    self._previous[signum] = signal.signal(signum, self._record)
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.signums.append(signum)

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


def _collect(pending: dict[Future[Row], Task], plan: RunPlan, timeout: float) -> Iterator[Row]:
    """The rows of the futures that finish within `timeout`; they leave `pending`."""
    finished, _ = wait(pending, timeout=max(timeout, 0.0), return_when=FIRST_COMPLETED)
    for future in finished:
        task = pending.pop(future)
        try:
            yield future.result()
        except _NotStarted:
            continue
        except BrokenProcessPool:
            yield failed_row(task, plan, _POOL_DIED)
        except Exception as exc:  # e.g. a runtime's interpreter that cannot be started
            yield failed_row(task, plan, _reason(exc))


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """SIGKILL the pool processes and every process they started, with those processes' groups:
    a codec worker leads its own group, so that also takes anything it spawned. (A pool process
    shares the harness's group; its pid names no group, so the group kill skips it.)"""
    tree: list[psutil.Process] = []
    for pid in list(pool._processes or ()):  # the pool names its processes only here
        try:
            process = psutil.Process(pid)
            tree += [process, *process.children(recursive=True)]
        except psutil.Error:
            continue
    for process in tree:
        try:
            process.kill()
        except psutil.Error:
            pass
        _kill_group(process.pid)
