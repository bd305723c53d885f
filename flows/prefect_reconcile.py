"""Mark the Prefect flow runs that killed sessions of a run folder left RUNNING as CRASHED.

A SIGKILLed run cannot report its end, so its flow run, and the task runs it had in flight, stay
RUNNING in Prefect for good. A resumed session holds its run folder (one run per folder), so any
other flow run of that folder still RUNNING or PENDING belongs to a session that is gone: it
becomes CRASHED, with the task runs it left unfinished.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterState,
    FlowRunFilterStateType,
    TaskRunFilter,
    TaskRunFilterState,
    TaskRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.context import FlowRunContext
from prefect.states import Crashed

log = logging.getLogger("evoforge.prefect")

_UNFINISHED = [StateType.RUNNING, StateType.PENDING]
_PAGE = 200  # the most rows the API returns at once


def _run_dir(parameters: dict[str, Any]) -> str | None:
    request = parameters.get("request")
    return request.get("run_dir") if isinstance(request, dict) else None


async def _every(read: Callable[..., Awaitable[list[Any]]], **filters: Any) -> list[Any]:
    """All the rows a Prefect read returns, page by page."""
    rows: list[Any] = []
    while True:
        page = await read(**filters, limit=_PAGE, offset=len(rows))
        rows += page
        if len(page) < _PAGE:
            return rows


async def crash_abandoned_runs(run_dir: str) -> tuple[int, int]:
    """Mark the other unfinished flow runs of `run_dir` (the `request.run_dir` parameter they were
    started with), and their unfinished task runs, CRASHED; returns (flow runs, task runs) marked.
    A failure is logged and the run goes on."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return 0, 0
    wanted, me = run_dir, ctx.flow_run.id
    try:
        async with get_client() as client:
            flows = await _every(client.read_flow_runs, flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=_UNFINISHED))))
            gone = [f for f in flows if f.id != me and _run_dir(f.parameters) == wanted]
            if not gone:
                return 0, 0
            message = f"the process that ran it was killed; flow run {ctx.flow_run.name} resumed the run"
            for run in gone:
                await client.set_flow_run_state(run.id, Crashed(message=message), force=True)
            tasks = await _every(client.read_task_runs,
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[f.id for f in gone])),
                task_run_filter=TaskRunFilter(state=TaskRunFilterState(
                    type=TaskRunFilterStateType(any_=_UNFINISHED))))
            for task in tasks:
                await client.set_task_run_state(task.id, Crashed(message=message), force=True)
    except Exception as exc:  # bookkeeping of dead runs: a warning, the run goes on
        log.warning("could not mark the flow runs of killed sessions crashed: %s", exc, exc_info=True)
        return 0, 0
    log.info("Prefect: %d flow runs and %d task runs left running by killed sessions marked CRASHED",
             len(gone), len(tasks))
    return len(gone), len(tasks)
