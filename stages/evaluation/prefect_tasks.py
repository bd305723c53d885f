"""Evaluations as Prefect task runs (`evaluate-<node>`, `trial-<node>-<k>`, `promote-<node>`,
`final-<node>`), on the flow's event loop or its task runner.

Each evaluation job (stages/evaluation/job.py) carries only snapshots, so where it runs is a
choice of `engine.executor`:

- `loop` (default): the task run is awaited on the flow's event loop. The job is asynchronous
  (a sandboxed subprocess), so this blocks nothing, and it costs ~4 ms of CPU per task run.
- `threads`: the job is submitted to the flow's task runner (a thread pool). Measured here,
  Prefect 3.9 spends ~50 ms of CPU on every such task run (each one builds two API clients with
  fresh TLS contexts in its thread), which is why it is not the default.
- `dask`: the job is submitted to prefect-dask's `DaskTaskRunner` and runs in a Dask worker
  process (stages/evaluation/dask_worker.py, stages/evaluation/dask_executor.py), here or on another machine.

The flow process stays the single writer. A speculative release made on a worker thread is
handed back to the flow's event loop, and so is one a Dask worker sends as a worker event
(stages/evaluation/dask_jobs.py, which also ships the task folder to the workers); a stopping run
aborts every job still running, on a Dask worker through a cluster-wide event.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from prefect import task
from prefect.futures import PrefectConcurrentFuture, PrefectFuture, PrefectWrappedFuture
from prefect.utilities.annotations import opaque

from evoforge.infra.prefect_tasks import TASK_OPTIONS
from evoforge.stages.evaluation.dask_executor import require_dask_runner
from evoforge.stages.evaluation.job import EvalReport, EvalRequest, EvaluationRunner, Release, run_evaluation

EXECUTORS = ("loop", "threads", "dask")


@task(name="evaluate", task_run_name="{name}", **TASK_OPTIONS)
async def evaluate_task(name: str, request: EvalRequest, release: Release | None,
                        abort: threading.Event) -> EvalReport:
    """One sandboxed evaluation (on a task-runner thread: its own event loop)."""
    return await run_evaluation(request, release, abort)


def run_name(request: EvalRequest) -> str:
    """The task run's name: the request's own (trial-…, promote-…, final-…) or evaluate-<node>."""
    return request.name or f"evaluate-{request.node_id}"


async def resolve(future: PrefectFuture[Any]) -> Any:
    """Await a task-runner future without blocking the event loop (or a thread)."""
    if isinstance(future, PrefectConcurrentFuture):
        await asyncio.wrap_future(future.wrapped_future)
        return future.result()
    if isinstance(future, PrefectWrappedFuture):  # e.g. Dask: a callback wakes the loop
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        future.wrapped_future.add_done_callback(lambda _: loop.call_soon_threadsafe(_settle, done))
        await done
        return future.result()
    return await asyncio.to_thread(future.result)


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class TaskEvaluations(EvaluationRunner):
    """Runs each evaluation as a Prefect task run: on the event loop, or submitted to the
    running flow's task runner (`threads`: its threads; `dask`: a Dask worker process)."""

    def __init__(self, executor: str = "loop") -> None:
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor '{executor}': one of {', '.join(EXECUTORS)}")
        self.dask: Any = None  # dask_jobs.DaskJobs (with the dask extra only)
        if executor == "dask":
            require_dask_runner()
            from evoforge.stages.evaluation.dask_jobs import DaskJobs  # needs distributed: the dask extra

            self.dask = DaskJobs()
        self.executor = executor
        self._aborts: dict[object, Callable[[], None]] = {}  # a running job -> what stops it

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        if self.dask is not None:
            return await self.dask.run(request, release, self._aborts)
        abort = threading.Event()
        self._aborts[abort] = abort.set
        try:
            if self.executor == "loop":
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
            self._aborts.pop(abort, None)

    def abort_all(self) -> None:
        for stop in list(self._aborts.values()):
            stop()
