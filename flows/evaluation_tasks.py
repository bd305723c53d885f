"""Evaluations as Prefect task runs on the flow's task runner (threads by default).

Each evaluation job (stages/evaluation_job.py) is submitted to the task runner of the running
flow as a task run `evaluate-<node>`, so swapping the runner (e.g. prefect-dask's
`DaskTaskRunner`) moves evaluations elsewhere without touching the engine. The job carries only
snapshots; the flow process stays the single writer. A speculative release made on a worker
thread is handed back to the flow's event loop; a stopping run aborts every job still running.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from prefect import task
from prefect.futures import PrefectConcurrentFuture, PrefectFuture
from prefect.utilities.annotations import opaque

from evoforge.flows.stage_calls import TASK_OPTIONS
from evoforge.stages.evaluation_job import EvalReport, EvalRequest, EvaluationRunner, Release, run_evaluation


@task(name="evaluate", task_run_name="evaluate-{node_id}", **TASK_OPTIONS)
async def evaluate_task(node_id: str, request: EvalRequest, release: Release | None,
                        abort: threading.Event) -> EvalReport:
    """One sandboxed evaluation (on a task-runner thread: its own event loop)."""
    return await run_evaluation(request, release, abort)


async def resolve(future: PrefectFuture[Any]) -> Any:
    """Await a task-runner future without blocking the event loop."""
    if isinstance(future, PrefectConcurrentFuture):
        await asyncio.wrap_future(future.wrapped_future)
        return future.result()
    return await asyncio.to_thread(future.result)  # other runners (e.g. Dask) block a thread


class TaskRunnerEvaluations(EvaluationRunner):
    """Submits each evaluation to the running flow's task runner."""

    def __init__(self) -> None:
        self._aborts: set[threading.Event] = set()

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        loop = asyncio.get_running_loop()
        on_loop = None
        if release is not None:
            def on_loop(partial: float, prefix: dict[str, float]) -> None:
                loop.call_soon_threadsafe(release, partial, prefix)

        abort = threading.Event()
        self._aborts.add(abort)
        try:
            future = evaluate_task.submit(request.node_id, opaque(request), opaque(on_loop), opaque(abort))
            return await resolve(future)
        except asyncio.CancelledError:
            abort.set()  # the job's thread kills its sandbox
            raise
        finally:
            self._aborts.discard(abort)

    def abort_all(self) -> None:
        for abort in list(self._aborts):
            abort.set()
