"""The flow's side of evaluations on Dask workers: the task shipped once, the job submitted, its
speculative release heard, and the job stopped on its worker.

The run's `--plugin` files go first, loaded on the scheduler and, as a `ShippedPlugins` worker
plugin, on every worker: a job's task may hold an instance of a class one of them defines (an
artifact kind), which the scheduler and a worker can only unpickle with the file loaded under the
same module name. The first job of a task packs its folder
(stages/evaluation/task_shipping.py) and registers it with the cluster as a `ShippedTask` worker
plugin named after the task: the scheduler keeps it and hands it to every worker, present or
joining later, which unpacks it into its cache. A run that ships a changed folder replaces the
plugin (a new digest, a new cache folder on each worker); the copies of earlier digests stay in
the workers' caches, which Dask deletes with the worker.

Speculative completion under Dask: the worker runs the speculation state machine on the cases as
they finish, against the reference taken at dispatch (the pool does not travel), and prunes there;
a release is sent back as a worker event on this runner's topic. The flow's Dask client calls the
handler on its own thread, which hands the release to the flow's event loop; the head applies it
as it does a release from a thread. A release that is still in flight when the job's result
arrives is waited for (at most `RELEASE_WAIT_S`), so the head always sees the release before the
full result, as with the other executors.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from prefect.context import FlowRunContext

from evoforge.evaluators.task import Task
from evoforge.infra.plugin_files import loaded
from evoforge.stages.evaluation.dask_executor import abort_event_name, abort_remote
from evoforge.stages.evaluation.dask_worker import (
    Shipment,
    ShippedPlugins,
    ShippedTask,
    evaluate_on_worker,
    load_plugin_files,
)
from evoforge.stages.evaluation.job import EvalReport, EvalRequest, Release
from evoforge.stages.evaluation.prefect_tasks import resolve, run_name
from evoforge.stages.evaluation.task_shipping import pack_task

log = logging.getLogger("evoforge.dask")
RELEASE_WAIT_S = 10.0
PLUGINS = "evoforge-plugin-files"  # the worker plugin holding the run's --plugin files


@dataclass
class _Listening:
    """A running job's release, and whether the flow has handed it to the head yet."""

    release: Release
    delivered: asyncio.Event = field(default_factory=asyncio.Event)


class DaskJobs:
    """Submits evaluation jobs to the flow's `DaskTaskRunner`, on a task shipped once per folder."""

    def __init__(self) -> None:
        self.topic = f"evoforge-release-{uuid.uuid4().hex}"
        self._shipped: dict[Path, Shipment] = {}
        self._plugins: tuple[str, ...] = ()  # the plug-in files' modules the workers have
        self._shipping = asyncio.Lock()
        self._listening: dict[str, _Listening] = {}
        self._subscribed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, request: EvalRequest, release: Release | None,
                  stops: dict[object, Any]) -> EvalReport:
        """The job on a Dask worker; `stops` holds what stops it while it runs."""
        shipment = await self._ship(request.task)
        job = abort_event_name()
        topic = None
        if release is not None:
            self._subscribe()
            self._listening[job] = _Listening(release)
            topic = self.topic
        # no `opaque` here: Dask's graph packing takes the annotation for a plain tuple
        future = evaluate_on_worker.submit(run_name(request), request, job, shipment, topic)
        stop = partial(abort_remote, future.wrapped_future, job)
        stops[future] = stop
        try:
            report = await resolve(future)
            return await self._settled(job, report)
        except asyncio.CancelledError:
            stop()
            raise
        finally:
            stops.pop(future, None)
            self._listening.pop(job, None)

    async def _ship(self, task: Task) -> Shipment:
        """The shipment of `task`'s folder, packed and registered with the cluster on first use."""
        async with self._shipping:
            shipment = self._shipped.get(task.root)
            if shipment is None:
                bundle = await asyncio.to_thread(pack_task, task.root)
                name = f"evoforge-task-{task.name}"
                client = await asyncio.to_thread(_client)  # created here on first use: it may start a cluster
                await self._ship_plugins(client)
                await asyncio.to_thread(client.register_plugin, ShippedTask(bundle, name), name)
                shipment = self._shipped[task.root] = Shipment(name, bundle.digest)
                log.info("task %s shipped to the Dask workers (%s)", task.name, bundle.describe())
            return shipment

    async def _ship_plugins(self, client: Any) -> None:
        """The plug-in files loaded here, to every worker (before a job that may need them)."""
        sources = list(loaded().values())
        names = tuple(s.name for s in sources)
        if not sources or names == self._plugins:
            return
        await asyncio.to_thread(client.run_on_scheduler, load_plugin_files, sources)  # it reads the graph
        await asyncio.to_thread(client.register_plugin, ShippedPlugins(sources), PLUGINS)
        self._plugins = names
        log.info("plug-in files shipped to the Dask workers: %s", ", ".join(s.path for s in sources))

    def _subscribe(self) -> None:
        if self._subscribed:
            return
        self._loop = asyncio.get_running_loop()
        _client().subscribe_topic(self.topic, self._on_event)
        self._subscribed = True

    def _on_event(self, event: tuple[float, dict[str, Any]]) -> None:
        """On the Dask client's thread: hand a worker's release to the flow's event loop."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._deliver, event[1])

    def _deliver(self, message: dict[str, Any]) -> None:
        listening = self._listening.get(message["job"])
        if listening is None or listening.delivered.is_set():  # the job is over: nothing to apply
            return
        listening.delivered.set()
        listening.release(message["partial"], message["prefix"])

    async def _settled(self, job: str, report: EvalReport) -> EvalReport:
        """The report, after the release it made (if any) reached the head."""
        listening = self._listening.get(job)
        if listening is None or report.released_at is None or listening.delivered.is_set():
            return report
        try:
            await asyncio.wait_for(listening.delivered.wait(), RELEASE_WAIT_S)
            return report
        except TimeoutError:
            log.warning("the speculative release of %s did not come back from its Dask worker in %.0f s: "
                        "the full result stands alone", job, RELEASE_WAIT_S)
            return replace(report, released_at=None)


def _client() -> Any:
    """The flow's Dask client (prefect-dask's `DaskTaskRunner.client`)."""
    ctx = FlowRunContext.get()
    assert ctx is not None
    return ctx.task_runner.client

