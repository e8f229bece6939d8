"""The row runner an executor's worker process holds: its own guarded scorer (one scoring process
that keeps the metric models loaded) and, in warm mode, its own persistent codec workers (one per
codec runtime, and one per configuration of a user codec), kept across the rows it is given."""

from __future__ import annotations

import os

from codecarena.metrics.guarded import GuardedScorer
from codecarena.metrics.scorer import Scorer
from codecarena.pipeline import RunOptions, Task, run_row
from codecarena.results.schema import Row
from codecarena.rundir import RunDir
from codecarena.runtime.persistent import WorkerSet


def scorer_for(opts: RunOptions, scorer: Scorer | None = None) -> GuardedScorer | None:
    """A guarded scorer with the run's metrics (or those of `scorer`): its scoring process loads the
    metric models once, and a metric that crashes or runs away fails alone, never this process."""
    metrics = scorer.metrics if scorer is not None else tuple(opts.metrics)
    if not metrics:
        return None
    models = scorer.asr_models if scorer is not None else dict(opts.asr_models)
    run = RunDir(opts.out)
    log = run.path("work", "scoring", f"scoring-{os.getpid()}.log")
    return GuardedScorer(metrics, models, opts.limits, log, opts.python, run.reference_results(), opts.metric_device)


class RowRunner:
    def __init__(self, opts: RunOptions, scorer: Scorer | None = None) -> None:
        self.opts = opts
        self.scorer = scorer_for(opts, scorer)
        run = RunDir(opts.out)
        self.workers = WorkerSet(opts.limits.memory_limit_bytes, run.persistent_logs(), opts.limits.guard_poll_s,
                                 opts.limits.stage_timeout_s, run.worker_folder)

    def run(self, task: Task) -> Row:
        return run_row(task.spec, task.ref, self.opts, RunDir(self.opts.out), self.scorer, task.mode, task.replay,
                       self.workers)

    def close(self) -> None:
        self.workers.stop()
        if self.scorer is not None:
            self.scorer.close()
