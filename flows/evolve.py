"""The evolution run as one long-lived async Prefect flow."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from prefect import flow

from evoforge.evaluators.cases import list_cases
from evoforge.evaluators.task import TaskError, load_task
from evoforge.flows.budget import Budget
from evoforge.flows.engine import AsyncEngine
from evoforge.flows.progress import tick
from evoforge.flows.runlog import attach_run_log, detach_run_log
from evoforge.flows.session import Session, open_session
from evoforge.flows.stage_tasks import StageTasks, build_stage_tasks
from evoforge.flows.sync_engine import SyncEngine
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.factory import make_backend
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.nodes import EVALUATED

log = logging.getLogger("evoforge.run")


ACCOUNTING = (
    "evaluations", "proposals", "nodes_evaluated", "nodes_failed", "candidates_per_min",
    "accepted_per_min", "proposals_per_min", "dropped_stale", "reflected", "patched", "pruned",
    "speculative_released", "confirmed", "rolled_back", "wasted_llm_s", "wasted_eval_s",
    "patched_llm_s", "tokens_in", "tokens_out", "llm_s", "eval_s", "commit_busy_s",
    "commit_wait_s", "wall_s",
)


class SeedFailed(TaskError):
    """The task's initial program does not pass its own evaluator."""


def _install_stop_handlers(stop: asyncio.Event) -> None:
    """First Ctrl+C (or SIGTERM): stop cleanly. Second Ctrl+C: abort."""
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            loop.remove_signal_handler(signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            return
        sys.stderr.write("\n[evoforge] stopping: finishing the commit queue (Ctrl+C again to abort)\n")
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        # outside the main thread this is refused and the default handlers stay
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal)


async def _evaluate_seed(session: Session, stages: StageTasks) -> None:
    if session.seed_item is None:
        return
    item = await stages.engineer(session.seed_item)
    session.committer.record_result(item)
    session.committer.flush()
    assert item.node is not None
    if item.node.status != EVALUATED:
        raise SeedFailed(f"the initial program of '{session.ctx.task.name}' failed its evaluation: "
                         f"{item.node.error}")


@flow(name="evoforge-run", persist_result=False, validate_parameters=False)
async def evolution_run(task_spec: str, run_dir: str, config: dict[str, Any], workspace: str,
                        prefect_tasks: bool = True, quiet: bool = False) -> dict[str, Any]:
    """Evolve the task's program until the budget is spent; returns the final status."""
    cfg = RunConfig.model_validate(config)
    task = load_task(task_spec)
    llm = make_backend(cfg.llm, cfg.seed)
    if isinstance(llm, OpenAIBackend):
        await llm.check()
    Path(run_dir).mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - startup, nothing runs yet
    cases = await list_cases(task, scratch_root=Path(run_dir)) if task.case_based else None
    session = open_session(task, cfg, Path(run_dir), llm, Path(workspace), cases=cases)
    handler = attach_run_log(session.paths.log)
    stop = asyncio.Event()
    _install_stop_handlers(stop)
    stages = build_stage_tasks(session.ctx, use_prefect=prefect_tasks)
    budget = Budget(cfg.budget, session.committer.stats)
    engine_cls = AsyncEngine if cfg.engine.mode == "async" else SyncEngine
    engine = engine_cls(session.ctx, session.committer, budget, stages, stop)
    started_at = time.time()
    log.info("run %s of %s in %s: mode %s, backend %s %s, %d resumed items",
             session.ctx.run_id, task.name, run_dir, cfg.engine.mode, llm.name, llm.model,
             len(session.resumed))

    def snapshot(state: str = "running") -> dict[str, Any]:
        return session.committer.write_snapshot({
            "state": state, "run_id": session.ctx.run_id, "task": task.name, "mode": cfg.engine.mode,
            "backend": llm.name, "model": llm.model, "pid": os.getpid(), "started_at": started_at,
            "updated_at": time.time(), "max_evals": cfg.budget.max_evals,
            "stop_reason": budget.stop_reason(), "internal_errors": len(stages.internal_errors),
            "mlflow_run_id": session.tracker.parent_run_id if session.tracker else None,
            **engine.gauges(),
        })

    def check_wall() -> None:
        if cfg.budget.max_wall_s is not None and budget.stop_reason() == "max_wall_s reached":
            stop.set()

    # the ticker also refreshes status.json and enforces max_wall_s, so it runs even when quiet
    ticker = asyncio.create_task(tick(snapshot, cfg.engine.progress_interval_s, cfg.budget.max_evals,
                                      on_tick=check_wall, show=not quiet))
    state, mlflow_status = "failed", "FAILED"
    try:
        await _evaluate_seed(session, stages)
        snapshot()
        await engine.run(session.resumed)
        state = "interrupted" if stop.is_set() and budget.stop_reason() is None else "finished"
        mlflow_status = "KILLED" if state == "interrupted" else "FINISHED"
    except Exception:
        log.exception("the run failed")
        raise
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        if not quiet:
            sys.stderr.write("\n")
        final = snapshot(state)
        log.info("run %s %s: %s", session.ctx.run_id, state, final.get("stop_reason"))
        if session.tracker is not None:  # the run's accounting on the parent MLflow run
            session.tracker.log_parent(metrics={k: v for k, v in final.items() if k in ACCOUNTING},
                                       step=final["evaluations"])
        session.close(mlflow_status)
        await llm.close()
        detach_run_log(handler)
    final["best_program"] = str(session.paths.best_program)
    return final
