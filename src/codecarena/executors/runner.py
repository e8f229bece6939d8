"""The row runner an executor's worker process holds: its own scorer and, in warm mode, its own
persistent codec workers (one per codec runtime), kept across the rows it is given."""

from __future__ import annotations

from pathlib import Path

from codecarena.metrics.scorer import Scorer
from codecarena.pipeline import RunOptions, Task, run_row
from codecarena.results.schema import Row
from codecarena.runtime.persistent import WorkerSet


def scorer_for(opts: RunOptions) -> Scorer | None:
    """A fresh scorer with the run's metrics; each process loads its own metric models once."""
    if not opts.metrics:
        return None
    return Scorer(tuple(opts.metrics), {lang: Path(folder) for lang, folder in opts.asr_models})


class RowRunner:
    def __init__(self, opts: RunOptions, scorer: Scorer | None = None) -> None:
        self.opts = opts
        self.scorer = scorer if scorer is not None else scorer_for(opts)
        self.workers = WorkerSet(opts.memory_limit, opts.out / "work" / "persistent", opts.poll_s,
                                 opts.timeout_s or 600.0)

    def run(self, task: Task) -> Row:
        return run_row(task.spec, task.ref, self.opts, self.opts.out, self.scorer, task.mode, task.replay,
                       self.workers)

    def close(self) -> None:
        self.workers.stop()
