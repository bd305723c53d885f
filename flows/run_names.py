"""Flow-run names after the task and the run id (`circle_packing-1a2b3c4d`), not Prefect's random ones.

A resumed run folder names its flow run from the start (status.json knows the task and run id);
a new folder gets a provisional name that the flow replaces once the session has made the run id.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.runtime import flow_run as current_flow_run

from evoforge.infra.runfiles import RunPaths, read_json

log = logging.getLogger("evoforge.prefect")


def run_name(task_name: str, run_id: str | None) -> str:
    """The name of a run's flow run: task and run id (`new` while a new folder has no id yet)."""
    return f"{task_name}-{run_id or 'new'}"


def folder_run_name(task: str, run_dir: str | Path) -> str:
    """The run name a run folder already knows (status.json), else a provisional one for `task`."""
    status = read_json(RunPaths(Path(run_dir)).status) or {}
    return run_name(str(status.get("task") or Path(task).name), status.get("run_id"))


def _field(params: Any, name: str) -> Any:
    """A parameter's field, whether Prefect holds the validated model or its JSON form."""
    return params.get(name) if isinstance(params, dict) else getattr(params, name)


def name_from_parameter(parameter: str, suffix: str = "") -> str:
    """`flow_run_name` callable body: the run name of the folder the flow's `parameter` points at."""
    params = current_flow_run.get_parameters()[parameter]
    return folder_run_name(_field(params, "task"), _field(params, "run_dir")) + suffix


async def rename_flow_run(name: str) -> None:
    """Rename the current flow run (no-op outside one, or when the name is already right)."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None or ctx.flow_run.name == name:
        return
    try:
        async with get_client() as client:
            await client.update_flow_run(ctx.flow_run.id, name=name)
        ctx.flow_run.name = name
    except Exception as exc:  # naming is tracking: a failure is a warning, the run goes on
        log.warning("could not rename flow run %s to %s: %s", ctx.flow_run.id, name, exc, exc_info=True)
