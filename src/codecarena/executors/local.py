"""The local executor: rows in this process (1 worker) or in a pool of local processes.

Each pool process holds a RowRunner, so in warm mode it keeps one persistent codec worker per
runtime and its own metric models for every row it is given. The pool uses `spawn`: the harness
may already hold threads and loaded libraries (rich, ONNX Runtime) that are not fork-safe.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from codecarena.executors.runner import RowRunner
from codecarena.metrics.scorer import Scorer
from codecarena.pipeline import RunOptions, Task, failed_row
from codecarena.results.schema import Row


def default_workers() -> int:
    return len(os.sched_getaffinity(0))


_RUNNER: RowRunner | None = None


def _init(opts: RunOptions) -> None:
    global _RUNNER
    _RUNNER = RowRunner(opts)


def _run(task: Task) -> Row:
    assert _RUNNER is not None
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

    def rows(self, tasks: list[Task], opts: RunOptions, scorer: Scorer | None) -> Iterator[Row]:
        if not tasks:
            return
        if self.workers == 1:
            runner = RowRunner(opts, scorer)
            try:
                for task in tasks:
                    try:
                        row = runner.run(task)
                    except Exception as exc:  # e.g. a runtime's interpreter that cannot be started
                        row = failed_row(task, opts, _reason(exc))
                    yield row
            finally:
                runner.close()
            return
        yield from self._pool_rows(tasks, opts)

    def _pool_rows(self, tasks: list[Task], opts: RunOptions) -> Iterator[Row]:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(self.workers, mp_context=context, initializer=_init, initargs=(opts,)) as pool:
            pending: dict[Future[Row], Task] = {pool.submit(_run, task): task for task in tasks}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    task = pending.pop(future)
                    try:
                        yield future.result()
                    except BrokenProcessPool:
                        # A pool process died (not a codec worker: those fail their own row). Every row it
                        # had not finished fails with this reason; a rerun computes them.
                        yield failed_row(task, opts, "a local executor process died before the row finished")
                    except Exception as exc:  # e.g. a runtime's interpreter that cannot be started
                        yield failed_row(task, opts, _reason(exc))
