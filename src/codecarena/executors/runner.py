"""The row runner an executor's worker process holds: its own guarded scorer (one scoring process
that keeps the metric models loaded) and, in warm mode, its own persistent codec workers (one per
codec runtime, and one per configuration of a user codec), kept across the rows it is given."""

from __future__ import annotations

import os

from codecarena.metrics.guarded import GuardedScorer
from codecarena.pipeline.plan import RunPlan
from codecarena.pipeline.row import Task, run_row
from codecarena.results.schema import Row
from codecarena.runtime.persistent import WorkerSet


def scorer_for(plan: RunPlan) -> GuardedScorer | None:
    """A guarded scorer with the run's metrics: its scoring process loads the metric models once, and a
    metric that crashes or runs away fails alone, never this process."""
    if not plan.plan.metrics:
        return None
    return GuardedScorer(tuple(plan.plan.metrics), dict(plan.plan.asr_models), plan.limits,
                         plan.run.scoring_log(os.getpid()), plan.python, plan.run.reference_results(),
                         plan.metric_device)


class RowRunner:
    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.scorer = scorer_for(plan)
        limits = plan.limits
        self.workers = WorkerSet(limits.memory_limit_bytes, plan.run.worker, limits.guard_poll_s,
                                 limits.stage_timeout_s)

    def run(self, task: Task) -> Row:
        return run_row(task, self.plan, self.scorer, self.workers)

    def close(self) -> None:
        self.workers.stop()
        if self.scorer is not None:
            self.scorer.close()
