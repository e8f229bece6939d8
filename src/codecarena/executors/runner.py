"""The row runner an executor's worker process holds: its own guarded scorer (one scoring process
that keeps the metric models loaded), its own templates (one per codec runtime, from which its cold
stages are forked; none with --fresh-interpreter or off Linux) and, in warm mode, its own persistent
codec workers (one per codec runtime, and one per configuration of a user codec), kept across the
rows it is given."""

from __future__ import annotations

import os
import sys

from codecarena.metrics.guarded import GuardedScorer
from codecarena.pipeline.plan import RunPlan
from codecarena.pipeline.row import Task, run_row
from codecarena.registry.catalog import FAMILIES
from codecarena.results.schema import Row
from codecarena.runtime.persistent import WorkerSet
from codecarena.runtime.templates import TemplateSet
from codecarena.sandbox import for_family


def scorer_for(plan: RunPlan) -> GuardedScorer | None:
    """A guarded scorer with the run's metrics: its scoring process loads the metric models once, and a
    metric that crashes or runs away fails alone, never this process."""
    if not plan.plan.metrics:
        return None
    return GuardedScorer(tuple(plan.plan.metrics), dict(plan.plan.asr_models), plan.limits,
                         plan.run.scoring_log(os.getpid()), plan.python, plan.run.reference_results(),
                         plan.metric_device)


def templates_for(plan: RunPlan) -> TemplateSet | None:
    """The run's templates, started (they import while the scorer loads): one per runtime interpreter
    that a built-in family of the plan runs in, importing those families' adapters. None with
    --fresh-interpreter, and off Linux (a template counts its threads in /proc)."""
    if plan.execution.fresh_interpreter or sys.platform != "linux":
        return None
    modules: dict[str, tuple[str, ...]] = {}
    for spec in plan.codecs:
        if not for_family(spec.family):  # a user codec's stages start in their sandbox
            python = plan.runtime_of(spec.family)[1]
            modules[python] = tuple(dict.fromkeys((*modules.get(python, ()), FAMILIES[spec.family].module)))
    templates = TemplateSet(modules, plan.run.worker)
    templates.start()
    return templates


class RowRunner:
    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.templates = templates_for(plan)
        self.scorer = scorer_for(plan)
        limits = plan.limits
        self.workers = WorkerSet(limits.memory_limit_bytes, plan.run.worker, limits.guard_poll_s,
                                 limits.stage_timeout_s)

    def run(self, task: Task) -> Row:
        return run_row(task, self.plan, self.scorer, self.workers, self.templates)

    def close(self) -> None:
        self.workers.stop()
        if self.templates is not None:
            self.templates.stop()
        if self.scorer is not None:
            self.scorer.close()
