"""The evaluation task as it runs in a Dask worker process (`engine.executor: dask`).

The worker gets an `EvalRequest` (snapshots only, pickled) and returns an `EvalReport` stamped
with where it ran; it holds no run state and never touches the node database. The task folder
must exist at the same path on the worker (the same machine, or a shared filesystem); the
scratch folder is the worker's own temp folder when the flow's does not exist there.

Two things cannot cross the process boundary: the speculative `release` callback (so early
release is off with Dask; pruning still happens here, on the worker) and the `abort`
threading.Event. Abort travels as a cluster-wide `distributed.Event` named by the flow: the task
polls it and, once set, aborts its job, whose sandbox kills the child's process group.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import distributed
from prefect import task

from evoforge.infra.prefect_tasks import TASK_OPTIONS
from evoforge.stages.evaluation.job import EvalReport, EvalRequest, run_evaluation

ABORT_POLL_S = 0.5  # how often a running evaluation asks the scheduler whether to stop


class WorkerSetupError(RuntimeError):
    """The worker cannot run the evaluation (e.g. the task folder is not on this machine)."""


def worker_name() -> str:
    """Where this process runs: host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def on_this_worker(request: EvalRequest) -> EvalRequest:
    """The request with paths that exist here: the task folder must, the scratch folder may."""
    evaluator = request.task.evaluator_path
    if not evaluator.is_file():
        raise WorkerSetupError(f"the task's evaluator {evaluator} is not on Dask worker {worker_name()}: "
                               "install the task folder at the same path on every worker "
                               "(or share it over a network filesystem)")
    if request.scratch.is_dir():
        return request
    return replace(request, scratch=Path(tempfile.gettempdir()))


async def _watch(event: distributed.Event, abort: threading.Event) -> None:
    """Set `abort` once the flow sets `event` (polled: one short scheduler call per period)."""
    while not abort.is_set():
        if await asyncio.to_thread(event.is_set):
            abort.set()
            return
        await asyncio.sleep(ABORT_POLL_S)


@task(name="evaluate", task_run_name="{name}", **TASK_OPTIONS)
async def evaluate_on_worker(name: str, request: EvalRequest, abort_event: str) -> EvalReport:
    """One sandboxed evaluation in a Dask worker; the flow stops it by setting `abort_event`."""
    request = on_this_worker(request)
    abort = threading.Event()
    watcher = asyncio.ensure_future(_watch(distributed.Event(abort_event, client=distributed.get_client()),
                                           abort))
    try:
        report = await run_evaluation(request, None, abort)
    finally:
        watcher.cancel()
    return replace(report, worker=worker_name())
