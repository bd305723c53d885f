"""Evaluations on a Dask cluster (`engine.executor: dask`): the task runner, the checks made
before a run starts, the Prefect API the workers report to, and how a running job is stopped.

prefect-dask's `DaskTaskRunner` runs each evaluation's task run in a worker process
(stages/evaluation/dask_worker.py). A worker creates and finishes its task run through the Prefect API it
finds in the flow's serialized settings, so it needs an API it can reach over HTTP. With
`PREFECT_API_URL` set (a `prefect server start`, or Prefect Cloud) that is the one; without it,
evoforge starts Prefect's temporary server (a local HTTP server on 127.0.0.1) before the flow and
hands its URL to the workers, which works for a local cluster and for a scheduler on this
machine. A scheduler on another host with no `PREFECT_API_URL` is a user error that says so.
The workers need no copy of the task: the run ships its folder (stages/evaluation/dask_jobs.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prefect.context import FlowRunContext
from prefect.settings import (
    PREFECT_API_URL,
    temporary_settings,
)
from prefect.task_runners import TaskRunner

from evoforge.infra.addresses import is_local_address
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.keys import key_env_names
from evoforge.infra.prefect_server import start_temporary_server

log = logging.getLogger("evoforge.dask")
SCHEDULER_TIMEOUT_S = 10.0
DASK_LOG_ENV = "DASK_LOGGING__DISTRIBUTED"  # Dask's own log level; evoforge's default: warning


class DaskSetupError(ValueError):
    """Dask mode cannot start: prefect-dask missing, the scheduler unreachable, no API for workers."""


def _prefect_dask() -> Any:
    try:
        import prefect_dask  # the dask extra is optional: imported only when the executor is dask
    except ImportError:
        raise DaskSetupError("engine.executor: dask needs prefect-dask: "
                             "pip install 'evoforge[dask]'") from None
    return prefect_dask


def dask_task_runner(cfg: RunConfig) -> TaskRunner:
    """prefect-dask's runner on the scheduler at `engine.dask_address`, or on a temporary local
    cluster of one single-threaded worker process per evaluation worker."""
    runner = _prefect_dask().DaskTaskRunner
    if cfg.engine.dask_address is not None:
        return runner(address=cfg.engine.dask_address)
    # workers never call an LLM: every key variable the config names is blank there (infra/llm/keys.py)
    env = {**dict.fromkeys(key_env_names(cfg), ""), DASK_LOG_ENV: os.environ.get(DASK_LOG_ENV, "warning")}
    return runner(cluster_class="distributed.LocalCluster", cluster_kwargs={
        "n_workers": cfg.engine.workers["engineer"], "threads_per_worker": 1, "processes": True, "env": env})


def check_scheduler(address: str) -> int:
    """Connect to the scheduler once; returns its worker count, or raises DaskSetupError."""
    import distributed  # with the dask extra only

    try:
        with distributed.Client(address, timeout=SCHEDULER_TIMEOUT_S, set_as_default=False) as client:
            return len(client.scheduler_info()["workers"])
    except (OSError, TimeoutError, ValueError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise DaskSetupError(f"cannot reach the Dask scheduler at {address}: {reason}") from None


@asynccontextmanager
async def dask_environment(cfg: RunConfig, log_path: Path | None = None,
                           shipping: str | None = None) -> AsyncIterator[None]:
    """Around the flow: the scheduler checked, and a Prefect API the workers can reach (a temporary
    server started here writes to `log_path`); `shipping` describes the task bundle the run ships."""
    _prefect_dask()
    if DASK_LOG_ENV not in os.environ:  # the scheduler and nannies of a local cluster log here
        logging.getLogger("distributed").setLevel(logging.WARNING)
    address, api = cfg.engine.dask_address, PREFECT_API_URL.value()
    if not api and address is not None and not is_local_address(address):
        raise DaskSetupError(
            f"Dask workers behind {address} cannot reach Prefect's temporary local server: start "
            "`prefect server start --host 0.0.0.0` and set PREFECT_API_URL=http://THIS_HOST:4200/api")
    where = f"a local cluster of {cfg.engine.workers['engineer']} worker processes"
    if address is not None:
        workers = await asyncio.to_thread(check_scheduler, address)
        where = f"the scheduler at {address} ({workers} worker{'' if workers == 1 else 's'} now)"
        if workers == 0:
            print(f"[evoforge] the Dask scheduler at {address} has no workers yet: evaluations wait "
                  "for one", file=sys.stderr)
    note = f"; the task folder ({shipping}) is shipped to them" if shipping else ""
    if api:
        print(f"[evoforge] executor dask: {where}; workers report to {api}{note}", file=sys.stderr)
        yield
        return
    server = await asyncio.to_thread(start_temporary_server, log_path)  # the one Prefect's clients use
    print(f"[evoforge] executor dask: {where}; workers report to Prefect's temporary server "
          f"{server.api_url}{note}", file=sys.stderr)
    with temporary_settings({PREFECT_API_URL: server.api_url}):
        yield


def require_dask_runner() -> None:
    """Raise DaskSetupError unless the running flow's task runner is prefect-dask's."""
    ctx = FlowRunContext.get()
    if ctx is None or not isinstance(ctx.task_runner, _prefect_dask().DaskTaskRunner):
        raise DaskSetupError("engine.executor: dask needs the flow to run on prefect-dask's "
                             "DaskTaskRunner (`evoforge run` sets it; a deployment must set it too)")


def abort_event_name() -> str:
    """A fresh name for the cluster-wide event that stops one evaluation."""
    return f"evoforge-abort-{uuid.uuid4().hex}"


def abort_remote(future: Any, event_name: str) -> None:
    """Stop one evaluation on its worker (set its event, cancel its future), off the caller's thread."""
    def signal() -> None:
        import distributed  # with the dask extra only

        try:
            distributed.Event(event_name, client=future.client).set()
            future.cancel()
        except (OSError, TimeoutError, RuntimeError) as exc:  # the cluster is gone: nothing runs there
            log.warning("could not abort a Dask evaluation (%s): %s", event_name, exc)

    threading.Thread(target=signal, name="evoforge-dask-abort", daemon=True).start()
