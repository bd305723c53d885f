"""The evaluation task as it runs in a Dask worker process (`engine.executor: dask`).

The worker gets an `EvalRequest` (snapshots only, pickled) and returns an `EvalReport` stamped
with where it ran; it holds no run state and never touches the node database, the run files or
MLflow. The run's `--plugin` files come with it too (`ShippedPlugins`, loaded on every worker
under the flow's module names before any job arrives). The task folder comes with the run, not
from the worker's disk: the flow registers a
`ShippedTask` plugin holding the folder's bundle (stages/evaluation/task_shipping.py), which every
worker of the cluster (and every worker that joins later) unpacks into its cache,
`<worker local directory>/evoforge-tasks/<digest>/`; the job evaluates against that copy. A
worker whose copy went missing unpacks it again from the plugin's bytes. The scratch folder is
the worker's own temp folder when the flow's does not exist there.

Two things cross the process boundary by Dask's messages rather than by pickling: the speculative
release goes back to the flow as a worker event on the run's topic (`log_event`; the flow's
client hands it to the head), and abort comes in as a cluster-wide `distributed.Event` named by
the flow, which the task polls and, once set, aborts its job, whose sandbox kills the child's
process group.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import distributed
from distributed.diagnostics.plugin import WorkerPlugin
from prefect import task

from evoforge.evaluators.task import Task
from evoforge.infra.artifacts import KINDS, ArtifactKind
from evoforge.infra.plugin_files import PluginSource, install
from evoforge.infra.plugin_registry import defined_classes
from evoforge.infra.prefect_tasks import TASK_OPTIONS
from evoforge.stages.evaluation.job import EvalReport, EvalRequest, Release, run_evaluation
from evoforge.stages.evaluation.task_shipping import TaskBundle, unpack

ABORT_POLL_S = 0.5  # how often a running evaluation asks the scheduler whether to stop
CACHE_FOLDER = "evoforge-tasks"  # under each worker's local directory


class WorkerSetupError(RuntimeError):
    """The worker cannot run the evaluation (the task the run shipped is not here)."""


@dataclass(frozen=True)
class Shipment:
    """Which shipped task a job evaluates against: the plugin holding it and its digest."""

    plugin: str
    digest: str


class ShippedTask(WorkerPlugin):
    """A task folder's bundle on every worker: unpacked into the worker's cache at setup."""

    def __init__(self, bundle: TaskBundle, name: str) -> None:
        self.bundle, self.name = bundle, name

    async def setup(self, worker: distributed.Worker) -> None:
        await asyncio.to_thread(unpack, self.bundle, task_cache(worker))


class ShippedPlugins(WorkerPlugin):
    """The run's plug-in files on every worker, loaded at setup under the module names they have in
    the flow: a job whose task holds an instance of a class one of them defines (a `--plugin`
    artifact kind) unpickles there. Without them the worker cannot read the job's message at all.
    (The scheduler, which unpickles the task graph too, gets them by `load_plugin_files`.)"""

    def __init__(self, sources: list[PluginSource]) -> None:
        self.sources = sources

    async def setup(self, worker: distributed.Worker) -> None:
        load_plugin_files(self.sources)


def load_plugin_files(sources: list[PluginSource]) -> None:
    """Load the plug-in files in this process (a worker or the scheduler) under the flow's module
    names, their artifact kinds known by name as in the flow."""
    modules = install(sources)
    KINDS.use_files([(cls, s.path) for s, m in zip(sources, modules, strict=True)
                     for cls in defined_classes(m, ArtifactKind)])


def task_cache(worker: distributed.Worker) -> Path:
    """The worker's cache of unpacked task folders."""
    return Path(worker.local_directory) / CACHE_FOLDER


def worker_name() -> str:
    """Where this process runs: host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def local_task(task: Task, shipment: Shipment, worker: distributed.Worker) -> Task:
    """The task rooted at this worker's copy of the shipped folder (unpacked again if it was lost)."""
    folder = task_cache(worker) / shipment.digest
    evaluator = folder / task.evaluator_path.relative_to(task.root)
    if not evaluator.is_file():
        plugin = worker.plugins.get(shipment.plugin)
        if not isinstance(plugin, ShippedTask) or plugin.bundle.digest != shipment.digest:
            raise WorkerSetupError(f"the task {task.name} (sha256 {shipment.digest[:12]}) the run shipped "
                                   f"is not on Dask worker {worker_name()} (a newer version replaced it)")
        unpack(plugin.bundle, task_cache(worker))
    return replace(task, root=folder, evaluator_path=evaluator)


def on_this_worker(request: EvalRequest, shipment: Shipment, worker: distributed.Worker) -> EvalRequest:
    """The request against this worker's copy of the task, with a scratch folder that exists here."""
    scratch = request.scratch if request.scratch.is_dir() else Path(tempfile.gettempdir())
    return replace(request, task=local_task(request.task, shipment, worker), scratch=scratch)


def release_to_flow(worker: distributed.Worker, topic: str, job: str) -> Release:
    """A release that sends (prefix score, prefix case scores) to the flow as a worker event."""
    def release(partial: float, prefix: dict[str, float]) -> None:
        worker.log_event(topic, {"job": job, "partial": partial, "prefix": dict(prefix)})

    return release


async def _watch(event: distributed.Event, abort: threading.Event) -> None:
    """Set `abort` once the flow sets `event` (polled: one short scheduler call per period)."""
    while not abort.is_set():
        if await asyncio.to_thread(event.is_set):
            abort.set()
            return
        await asyncio.sleep(ABORT_POLL_S)


@task(name="evaluate", task_run_name="{name}", **TASK_OPTIONS)
async def evaluate_on_worker(name: str, request: EvalRequest, job: str, shipment: Shipment,
                             release_topic: str | None) -> EvalReport:
    """One sandboxed evaluation in a Dask worker on its copy of the shipped task; the flow stops it
    by setting the event named `job`, and hears its speculative release on `release_topic`."""
    worker = distributed.get_worker()
    request = await asyncio.to_thread(on_this_worker, request, shipment, worker)
    release = release_to_flow(worker, release_topic, job) if release_topic is not None else None
    abort = threading.Event()
    watcher = asyncio.ensure_future(_watch(distributed.Event(job, client=distributed.get_client()), abort))
    try:
        report = await run_evaluation(request, release, abort)
    finally:
        watcher.cancel()
    return replace(report, worker=worker_name())
