"""The evolution flow's Prefect task runner, chosen by `engine.executor`, and what it needs
around the flow run.

Only evaluations are submitted to the task runner (stages/evaluation/prefect_tasks.py); every other
stage runs on the flow's event loop. `loop` and `threads` get a thread pool wide enough for
every evaluation worker; `dask` gets prefect-dask's `DaskTaskRunner` (stages/evaluation/dask_executor.py),
after a check that the task folder can be shipped to its workers (stages/evaluation/task_shipping.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from evoforge.evaluators.task import load_task
from evoforge.flows.prepare import RunRequest
from evoforge.infra.prefect_server import needs_temporary_server, start_temporary_server
from evoforge.stages.evaluation.dask_executor import DaskSetupError, dask_environment, dask_task_runner
from evoforge.stages.evaluation.task_shipping import ShipError, pack_task


def task_runner_for(request: RunRequest) -> TaskRunner:
    """Threads enough for every evaluation worker the run may have, or a Dask cluster."""
    config = request.config
    if config.engine.executor == "dask":
        return dask_task_runner(config)
    most = max(config.engine.workers["engineer"],
               config.adaptive.max_workers["engineer"] if config.adaptive.enabled else 0)
    return ThreadPoolTaskRunner(max_workers=most + 1)


@asynccontextmanager
async def runner_environment(request: RunRequest) -> AsyncIterator[None]:
    """Around the flow run: Prefect's temporary server started with its output in run.log (when no
    API is set), and (dask) a checked scheduler with an API its workers reach."""
    log_path = Path(request.run_dir) / "run.log" if request.run_dir else None
    if request.config.engine.executor != "dask":
        if needs_temporary_server():
            await asyncio.to_thread(start_temporary_server, log_path)
        yield
        return
    if not request.prefect_tasks:
        raise DaskSetupError("engine.executor: dask runs evaluations as Prefect task runs: "
                             "drop --no-prefect-tasks")
    try:  # what the workers will get, checked before the cluster starts
        bundle = await asyncio.to_thread(pack_task, load_task(request.task).root)
    except ShipError as exc:
        raise DaskSetupError(str(exc)) from None
    async with dask_environment(request.config, log_path, bundle.describe()):
        yield

