"""The Ray executor: rows as tasks on Ray actors, one actor per worker slot.

Each actor holds a RowRunner (its own scorer and, in warm mode, its own persistent codec workers),
so a row runs on a Ray node exactly as it runs in a local pool process: codec stages are worker
subprocesses started from the actor with the run's interpreters, and every file is written to the
run directory. Ray therefore needs, on every node, the same codecarena install and codec runtimes
at the same paths and the run directory on a shared filesystem (docs/performance.md). Without
`--ray-address` a private local cluster is started on 127.0.0.1 and stopped afterwards.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from codecarena.executors.local import default_workers
from codecarena.executors.runner import RowRunner
from codecarena.pipeline.plan import RunPlan
from codecarena.pipeline.row import Task, failed_row
from codecarena.results.schema import Row

# What Ray needs to stay on loopback and quiet (docs/performance.md, measured with ray 2.60.0).
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
# Beyond the row's own stage timeouts: scoring and actor start-up.
_ROW_SLACK_S = 900.0


class _RowActor:
    def __init__(self, plan: RunPlan) -> None:
        self.runner = RowRunner(plan)

    def run(self, task: Task) -> tuple[Row, str]:
        """The row, and the id of the Ray node it ran on."""
        import ray

        return self.runner.run(task), ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.runner.close()


class RayExecutor:
    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        self.address, self.workers = address, workers
        self.info: dict[str, Any] = {"executor": "ray", "address": address or "local cluster on 127.0.0.1",
                                     "workers": workers}

    def describe(self) -> dict[str, Any]:
        return dict(self.info)

    def _connect(self) -> Any:
        for key, value in RAY_ENV.items():
            os.environ.setdefault(key, value)
        import ray

        common: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
        if self.address:
            ray.init(address=self.address, **common)
        else:
            temp = tempfile.mkdtemp(prefix="ccray-", dir="/tmp")  # Ray's Unix socket paths must stay short
            ray.init(num_cpus=self.workers or default_workers(), include_dashboard=False,
                     _node_ip_address="127.0.0.1", object_store_memory=100 * 2**20, _temp_dir=temp, **common)
        self.info["ray"] = ray.__version__
        self.info["cluster_cpus"] = int(ray.cluster_resources().get("CPU", 0))
        return ray

    def rows(self, tasks: list[Task], plan: RunPlan) -> Iterator[Row]:
        if not tasks:
            return
        ray = self._connect()
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        actor_class = ray.remote(num_cpus=1)(_RowActor)
        slots = self.workers or max(1, self.info["cluster_cpus"])
        self.info["workers"] = slots
        # Ray node id -> the (codec, utterance) keys of the rows computed there, in completion order.
        nodes: dict[str, list[list[str]]] = {}
        self.info["nodes"] = nodes
        actors = [actor_class.remote(plan) for _ in range(min(slots, len(tasks)))]
        queue = list(tasks)
        inflight: dict[Any, tuple[Any, Task]] = {}
        bound = 3 * plan.limits.stage_timeout_s + _ROW_SLACK_S

        def submit(actor: Any) -> None:
            task = queue.pop(0)
            inflight[actor.run.remote(task)] = (actor, task)

        try:
            for actor in actors:
                submit(actor)
            while inflight:
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=bound)
                if not ready:
                    why = f"no Ray result within {bound:g} s"
                    for _, task in inflight.values():
                        yield failed_row(task, plan, why)
                    for task in queue:
                        yield failed_row(task, plan, f"not started: {why}")
                    return
                actor, task = inflight.pop(ready[0])
                try:
                    row, node = ray.get(ready[0], timeout=60)
                    nodes.setdefault(node, []).append([row.codec, row.utterance])
                    yield row
                except RayActorError as exc:
                    # The actor process died; its row fails and a new actor takes its place.
                    yield failed_row(task, plan, f"Ray actor died: {str(exc).splitlines()[0]}")
                    actors.remove(actor)
                    actor = actor_class.remote(plan)
                    actors.append(actor)
                except (RayTaskError, GetTimeoutError) as exc:
                    yield failed_row(task, plan, f"Ray task failed: {str(exc).splitlines()[0]}")
                if queue:
                    submit(actor)
        finally:
            for actor in actors:
                try:
                    ray.get(actor.close.remote(), timeout=30)
                except Exception:  # an actor that is already gone has nothing to close
                    pass
                ray.kill(actor)
            ray.shutdown()
