"""Deployments: the `evoforge-scheduled` flow continues one run folder for a fixed number of
evaluations per triggered run, and `serve_deployment` serves it with an optional schedule.

Each scheduled or UI-triggered run counts the evaluations already in the folder (the way the budget
counts them) and runs the evolution flow as a subflow with `budget.max_evals` = that count + K.
The parameters are a typed model, so the Prefect UI shows a form; they hold no secret: the flow
process reads OPENAI_API_KEY from its own environment (`LLMConfig.secret_key`).

No `from __future__ import annotations` here: the runner pickles the flow by value into a spawned
process, and a string annotation would no longer resolve to `DeploymentParams` there.
"""

import logging
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Literal

from prefect import flow
from prefect.deployments.runner import EntrypointType
from pydantic import BaseModel, ConfigDict, Field

from evoforge.flows.evolve import run_prepared
from evoforge.flows.prefect_logs import attach_prefect_log, detach_prefect_log
from evoforge.flows.prepare import RunRequest, prepare
from evoforge.flows.run_names import name_from_parameter, rename_flow_run, run_name
from evoforge.infra.config_load import load_config
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.population.stats import RunStats

log = logging.getLogger("evoforge.deploy")

SCHEDULED_SUFFIX = "-scheduled"


class DeploymentParams(BaseModel):
    """What one triggered run of a deployment does (the Prefect UI's form); never a secret."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(description="a built-in task name (e.g. circle_packing) or a task folder")
    run_dir: str = Field(description="the run folder every triggered run continues (absolute)")
    max_evals_per_run: int = Field(default=10, ge=1,
                                   description="evaluations each triggered run adds to the folder")
    workspace: str | None = Field(default=None, description="runs, MLflow and cognition folder")
    config_file: str | None = Field(default=None, description="YAML config, read at every run")
    llm_base_url: str | None = Field(default=None, description="OpenAI-compatible server; none: offline")
    llm_model: str | None = None
    mode: Literal["async", "sync"] | None = None
    seed: int | None = None
    max_wall_s: float | None = Field(default=None, gt=0, description="wall-clock limit of one run")
    prefect_tasks: bool = Field(default=True, description="stages and evaluations as Prefect task runs")

    def overrides(self, max_evals: int) -> dict[str, Any]:
        """The config keys these parameters set (None: the config file's or the default)."""
        return {"workspace": self.workspace, "llm.base_url": self.llm_base_url,
                "llm.model": self.llm_model, "engine.mode": self.mode, "seed": self.seed,
                "budget.max_wall_s": self.max_wall_s, "budget.max_evals": max_evals}


def evaluations_in(run_dir: Path) -> int:
    """Evaluations already in a run folder, counted from its node database as the budget counts."""
    db = RunPaths(run_dir).db
    if not db.is_file():
        return 0
    with NodeStore(db, read_only=True) as store:  # StoreBusyError while another process writes it
        return RunStats.rebuild(store.all()).evaluations


@flow(name="evoforge-scheduled", persist_result=False,
      flow_run_name=partial(name_from_parameter, "params", suffix=SCHEDULED_SUFFIX))
async def scheduled_run(params: DeploymentParams) -> dict[str, Any]:
    """Continue the run folder for `max_evals_per_run` more evaluations; returns the final status."""
    attached = attach_prefect_log("evoforge.deploy")
    try:
        run_dir = Path(params.run_dir).resolve()  # noqa: ASYNC240 - startup; relative: to the working dir
        done = evaluations_in(run_dir)
        cfg = load_config(params.config_file, params.overrides(done + params.max_evals_per_run))
        log.info("%s: %d evaluations in the folder, this run goes to %d", run_dir, done,
                 cfg.budget.max_evals)
        request = RunRequest(task=params.task, run_dir=str(run_dir), config=cfg,
                             prefect_tasks=params.prefect_tasks, quiet=True)
        final = await run_prepared(prepare(request))
        if final.get("run_id"):
            await rename_flow_run(run_name(final["task"], final["run_id"]) + SCHEDULED_SUFFIX)
        log.info("%s: %s with %s evaluations, best score %s", run_dir, final.get("state"),
                 final.get("evaluations"), final.get("best_score"))
        return final
    finally:
        await detach_prefect_log(attached)


def serve_deployment(name: str, params: DeploymentParams, cron: str | None = None,
                     interval_s: float | None = None) -> None:
    """Serve `evoforge-scheduled/<name>` until interrupted: one flow run at a time (the folder has
    one writer), each in its own process."""
    scheduled_run.serve(
        name=name, parameters={"params": params.model_dump(mode="json")}, cron=cron,
        interval=timedelta(seconds=interval_s) if interval_s is not None else None,
        description=f"evoforge: {params.task} in {params.run_dir}, "
                    f"{params.max_evals_per_run} more evaluations per run",
        tags=["evoforge"], limit=1, entrypoint_type=EntrypointType.MODULE_PATH)
