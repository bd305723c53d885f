"""The evolution run as one long-lived async Prefect flow."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from functools import partial
from typing import Any

from prefect import flow

from evoforge.evaluators.cases import list_cases
from evoforge.evaluators.fitness import reported_error
from evoforge.evaluators.sandbox import describe_isolation
from evoforge.evaluators.task import TaskError
from evoforge.evaluators.warm import WARM
from evoforge.flows.adaptive import AdaptiveController
from evoforge.flows.budget import Budget
from evoforge.flows.engine import Engine
from evoforge.flows.gated_run import finish_gated, round_jobs
from evoforge.flows.policies import AsyncPolicy, BarrierPolicy
from evoforge.flows.prefect_artifacts import RunArtifacts
from evoforge.flows.prefect_logs import attach_prefect_log, detach_prefect_log
from evoforge.flows.prefect_reconcile import crash_abandoned_runs
from evoforge.flows.prepare import Prepared, RunRequest, hand_over, take_over
from evoforge.flows.progress import tick
from evoforge.flows.promotion_flow import LiveRun, live_runs
from evoforge.flows.run_names import name_from_parameter, rename_flow_run, run_name
from evoforge.flows.runlog import attach_run_log, detach_run_log
from evoforge.flows.session import Session, open_session
from evoforge.flows.stage_calls import StageCalls
from evoforge.flows.task_runners import runner_environment, task_runner_for
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.infra.timeline import Timeline
from evoforge.infra.tracking import tracking_target
from evoforge.stages.engineer import Engineer
from evoforge.stages.evaluation.prefect_tasks import TaskEvaluations
from evoforge.stages.evaluation.slots import SlottedEvaluations
from evoforge.stages.param_search import ParamSearch
from evoforge.stages.pipeline.registry import default_stages
from evoforge.stages.pipeline.stage import Stage
from evoforge.stages.sinks.model_usage import model_metrics

log = logging.getLogger("evoforge.run")


ACCOUNTING = (
    "evaluations", "proposals", "nodes_evaluated", "nodes_failed", "candidates_per_min",
    "accepted_per_min", "proposals_per_min", "dropped_stale", "reflected", "patched", "pruned",
    "speculative_released", "confirmed", "rolled_back", "wasted_llm_s", "wasted_eval_s",
    "patched_llm_s", "tokens_in", "tokens_out", "llm_s", "eval_s", "eval_cpu_s", "trials", "promotions",
    "commit_busy_s",
    "commit_wait_s", "wall_s", "llm_pauses", "llm_paused_s",
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


def _remove_stop_handlers() -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(sig)


async def _evaluate_seed(session: Session, calls: StageCalls, stages: list[Stage]) -> None:
    """Evaluate the task's initial program (and tune its knobs) before anything else runs."""
    if session.seed_item is None:
        return
    item, ctx = session.seed_item, session.ctx
    for stage in stages:
        if isinstance(stage, Engineer) or (isinstance(stage, ParamSearch) and stage.enabled(ctx.config)
                                           and not stage.skips(item, ctx)):
            result = await calls.run(stage, item)
            item.apply(result.node, result.updates)
    assert item.node is not None
    _refuse_erring_seed(item.node, ctx.task.search_level, ctx.config.guard.accept_failing_seed)
    session.committer.record_result(item)
    session.committer.flush()
    if item.node.status != EVALUATED:
        raise SeedFailed(f"the initial program of '{session.ctx.task.name}' failed its evaluation: "
                         f"{item.node.error}")


def _refuse_erring_seed(node: Node, level: str, accept: bool) -> None:
    """Fail a seed whose evaluator reported an error beside its score, unless told to accept it
    (OpenEvolve evolves from it silently); a rerun evaluates a failed seed again."""
    reported = reported_error(node.artifacts) if node.status == EVALUATED else ""
    if reported and not accept:
        node.status, node.failed_stage = FAILED, "engineer"
        node.error = (f"it scored {node.score(level)} but its evaluator reported error: {reported} "
                      f"(pass --accept-failing-seed, or guard.accept_failing_seed: true, to evolve from it)")


async def run_prepared(prepared: Prepared) -> dict[str, Any]:
    """Check the LLM once, then run the evolution flow on the prepared run (the CLI's path)."""
    await prepared.check_llm(announce=True)
    token = hand_over(prepared)
    try:
        flow_fn = evolution_run.with_options(task_runner=task_runner_for(prepared.request))
        async with runner_environment(prepared.request):
            return await flow_fn(prepared.request)
    finally:
        await prepared.llm.close()
        token.var.reset(token)


@flow(name="evoforge-run", persist_result=False, flow_run_name=partial(name_from_parameter, "request"))
async def evolution_run(request: RunRequest) -> dict[str, Any]:
    """Evolve the task's program until the budget is spent; returns the final status."""
    prepared = take_over(request)
    await prepared.check_llm()
    cfg, task, llm = prepared.config, prepared.task, prepared.llm
    prepared.run_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - startup, nothing runs yet
    cases = await list_cases(task, scratch_root=prepared.run_dir) if task.case_based else None
    session = open_session(task, cfg, prepared.run_dir, llm, prepared.workspace, cases=cases,
                           cognition=prepared.cognition)
    handler = attach_run_log(session.paths.log)
    api_log = attach_prefect_log()  # evoforge's INFO lines in the flow run's Logs tab
    await rename_flow_run(run_name(task.name, session.ctx.run_id))  # a new folder has its id now
    await crash_abandoned_runs(request.run_dir)  # flow runs of killed sessions: CRASHED, not RUNNING
    artifacts = RunArtifacts(task.name, session.ctx.run_id, cfg.budget.max_evals)
    try:
        target = tracking_target(prepared.workspace, task.name, cfg.tracking.tracking_uri,
                                 cfg.tracking.experiment)
        await artifacts.start(session.committer.stats.evaluations, target,
                              session.tracker.parent_run_id if session.tracker else None)
        return await _run_session(session, prepared, artifacts)
    finally:
        await artifacts.finish(session.committer.stats.evaluations, session.ctx.pool, task.name,
                               session.paths.report.read_text() if session.paths.report.is_file() else None)
        await detach_prefect_log(api_log)
        detach_run_log(handler)


async def _run_session(session: Session, prepared: Prepared, artifacts: RunArtifacts) -> dict[str, Any]:
    cfg, task, llm, request = prepared.config, prepared.task, prepared.llm, prepared.request
    stop = asyncio.Event()
    _install_stop_handlers(stop)
    if request.prefect_tasks:
        session.ctx.evaluations = TaskEvaluations(cfg.engine.executor)
    session.ctx.evaluations = SlottedEvaluations(session.ctx.evaluations, cfg.engine.workers.engineer)
    calls = StageCalls(session.ctx, use_prefect=request.prefect_tasks)
    stages = default_stages()
    budget = Budget(cfg.budget, session.committer.stats)
    policy = BarrierPolicy() if cfg.engine.mode == "sync" else \
        AsyncPolicy(cfg.engine.queue_size or cfg.engine.workers.engineer)
    adaptive = cfg.adaptive.enabled and cfg.engine.mode == "async"
    controller = AdaptiveController(cfg.adaptive) if adaptive else None
    engine = Engine(session.ctx, session.committer, budget, stages, calls, stop, policy, controller)
    started_at = time.time()
    log.info("run %s of %s in %s: mode %s, backend %s %s, stages %s, %d resumed items, cognition %s",
             session.ctx.run_id, task.name, prepared.run_dir, cfg.engine.mode, llm.name, llm.model,
             " -> ".join(engine.stage_names()), len(session.resumed),
             f"{prepared.cognition.count()} items ({prepared.cognition.embedder.name})"
             if prepared.cognition is not None else "off")

    timeline = Timeline(session.paths.timeline, session=started_at)  # one line per snapshot, for plots
    sandbox_isolation = describe_isolation(cfg.sandbox.isolate)
    log.info("sandbox: user %(user)s; network %(network)s; filesystem %(filesystem)s; "
             "process limit %(process_limit)s", sandbox_isolation)

    def snapshot(state: str = "running") -> dict[str, Any]:
        status = session.committer.write_snapshot({
            "state": state, "run_id": session.ctx.run_id, "task": task.name, "mode": cfg.engine.mode,
            "backend": llm.name, "model": llm.model, "pid": os.getpid(), "started_at": started_at,
            "updated_at": time.time(), "max_evals": cfg.budget.max_evals,
            "stop_reason": budget.stop_reason(),
            "mlflow_run_id": session.tracker.parent_run_id if session.tracker else None,
            "models": session.committer.models.as_dict(),
            "sandbox": {**sandbox_isolation, **WARM.describe(cfg.sandbox.warm)},
            **engine.gauges(),
        })
        timeline.append(status, t=status["updated_at"])
        return status

    def check_wall() -> None:
        if cfg.budget.max_wall_s is not None and budget.stop_reason() == "max_wall_s reached":
            stop.set()

    def on_tick() -> None:
        check_wall()
        artifacts.poke(session.committer.stats.evaluations)  # the progress artifact, throttled

    def ticker():  # refreshes status.json and enforces max_wall_s, so it runs even when quiet
        return tick(snapshot, cfg.engine.progress_interval_s, cfg.budget.max_evals,
                    on_tick=on_tick, show=not request.quiet)

    live_runs[session.ctx.run_id] = LiveRun(session.ctx, session.committer, engine.in_commit)
    state, mlflow_status = "failed", "FAILED"
    try:
        await _evaluate_seed(session, calls, stages)
        background = [ticker, *round_jobs(engine, session)]
        snapshot()
        await engine.run(session.resumed, background=background)
        state = "interrupted" if stop.is_set() and budget.stop_reason() is None else "finished"
        mlflow_status = "KILLED" if state == "interrupted" else "FINISHED"
        if state == "finished":
            await finish_gated(session)
    except Exception:
        log.exception("the run failed")
        raise
    finally:
        live_runs.pop(session.ctx.run_id, None)
        _remove_stop_handlers()
        final = _final_snapshot(snapshot, state)  # (the live display ended its own lines)
        log.info("run %s %s: %s", session.ctx.run_id, state, final.get("stop_reason"))
        if session.tracker is not None and final:  # the run's accounting on the parent MLflow run
            session.tracker.log_parent(metrics={**{k: v for k, v in final.items() if k in ACCOUNTING},
                                                **model_metrics(final.get("models", {}))},
                                       step=final["evaluations"])
        session.close(mlflow_status)
    final["best_program"] = str(session.paths.best_program)
    return final


def _final_snapshot(snapshot: Any, state: str) -> dict[str, Any]:
    """The last status.json; a failure to write it is logged, never stops the close that follows."""
    try:
        return snapshot(state)
    except Exception:
        log.exception("could not write the final snapshot")
        return {}
