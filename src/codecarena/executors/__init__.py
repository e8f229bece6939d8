"""Executors: who runs the rows. `local` (this process, or a pool of local processes) and `ray`
(actors on a Ray cluster). Rows are independent; every executor produces the same rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codecarena.pipeline.execute import Executor
    from codecarena.pipeline.plan import Execution


def executor_for(execution: Execution) -> Executor:
    """The executor a run's `Execution` names (Ray is imported only when it is named)."""
    if execution.executor == "ray":
        from codecarena.executors.ray_cluster import RayExecutor

        return RayExecutor(address=execution.ray_address, workers=execution.workers)
    from codecarena.executors.local import LocalExecutor

    return LocalExecutor(workers=execution.workers)
