"""Evaluations as Prefect task runs (`evaluate-<node>`, `trial-<node>-<k>`, `promote-<node>`,
`final-<node>`), on the flow's event loop or its task runner.

Each evaluation job (stages/evaluation_job.py) carries only snapshots, so where it runs is a
choice of `engine.executor`:

- `loop` (default): the task run is awaited on the flow's event loop. The job is asynchronous
  (a sandboxed subprocess), so this blocks nothing, and it costs ~4 ms of CPU per task run.
- `threads`: the job is submitted to the flow's task runner (a thread pool). Measured here,
  Prefect 3.9 spends ~50 ms of CPU on every such task run (each one builds two API clients with
  fresh TLS contexts in its thread), which is why it is not the default. Swapping the task runner
  (e.g. prefect-dask's `DaskTaskRunner`) moves evaluations elsewhere without touching the engine.

The flow process stays the single writer. A speculative release made on a worker thread is
handed back to the flow's event loop; a stopping run aborts every job still running.
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


@task(name="evaluate", task_run_name="{name}", **TASK_OPTIONS)
async def evaluate_task(name: str, request: EvalRequest, release: Release | None,
                        abort: threading.Event) -> EvalReport:
    """One sandboxed evaluation (on a task-runner thread: its own event loop)."""
    return await run_evaluation(request, release, abort)


def run_name(request: EvalRequest) -> str:
    """The task run's name: the request's own (trial-…, promote-…, final-…) or evaluate-<node>."""
    return request.name or f"evaluate-{request.node_id}"


async def resolve(future: PrefectFuture[Any]) -> Any:
    """Await a task-runner future without blocking the event loop."""
    if isinstance(future, PrefectConcurrentFuture):
        await asyncio.wrap_future(future.wrapped_future)
        return future.result()
    return await asyncio.to_thread(future.result)  # other runners (e.g. Dask) block a thread


class TaskEvaluations(EvaluationRunner):
    """Runs each evaluation as a Prefect task run: on the event loop, or submitted to the
    running flow's task runner (`submit=True`)."""

    def __init__(self, submit: bool = False) -> None:
        self.submit = submit
        self._aborts: set[threading.Event] = set()

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        abort = threading.Event()
        self._aborts.add(abort)
        try:
            if not self.submit:
                return await evaluate_task(run_name(request), opaque(request), opaque(release),
                                           opaque(abort))
            loop = asyncio.get_running_loop()
            on_loop = None
            if release is not None:
                def on_loop(partial: float, prefix: dict[str, float]) -> None:
                    loop.call_soon_threadsafe(release, partial, prefix)

            future = evaluate_task.submit(run_name(request), opaque(request), opaque(on_loop),
                                          opaque(abort))
            return await resolve(future)
        except asyncio.CancelledError:
            abort.set()  # the job's thread kills its sandbox
            raise
        finally:
            self._aborts.discard(abort)

    def abort_all(self) -> None:
        for abort in list(self._aborts):
            abort.set()
