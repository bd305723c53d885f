"""The evolution flow's Prefect task runner, chosen by `engine.executor`, and what it needs
around the flow run.

Only evaluations are submitted to the task runner (flows/evaluation_tasks.py); every other
stage runs on the flow's event loop. `loop` and `threads` get a thread pool wide enough for
every evaluation worker; `dask` gets prefect-dask's `DaskTaskRunner` (flows/dask_executor.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from evoforge.flows.dask_executor import DaskSetupError, dask_environment, dask_task_runner
from evoforge.flows.prepare import RunRequest


def task_runner_for(request: RunRequest) -> TaskRunner:
    """Threads enough for every evaluation worker the run may have, or a Dask cluster."""
    config = request.config
    if config.engine.executor == "dask":
        return dask_task_runner(config)
    most = max(config.engine.workers.engineer,
               config.adaptive.max_engineer if config.adaptive.enabled else 0)
    return ThreadPoolTaskRunner(max_workers=most + 1)


@asynccontextmanager
async def runner_environment(request: RunRequest) -> AsyncIterator[None]:
    """Around the flow run: nothing, or (dask) a checked scheduler and an API its workers reach."""
    if request.config.engine.executor != "dask":
        yield
        return
    if not request.prefect_tasks:
        raise DaskSetupError("engine.executor: dask runs evaluations as Prefect task runs: "
                             "drop --no-prefect-tasks")
    async with dask_environment(request.config):
        yield

