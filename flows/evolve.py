"""The evolution run as one long-lived async Prefect flow.

The flow is built around the prepared run (`evolution_flow(prepared)`): its one Prefect
parameter stays the plain `RunRequest` (what the UI shows), and the live objects (config, task,
LLM backends) are the closure's, never a module's."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from prefect import Flow, flow

from evoforge.evaluators.cases import list_cases
from evoforge.evaluators.fitness import reported_error
from evoforge.evaluators.io_threads import off_loop
from evoforge.evaluators.isolation_notice import isolation_notices
from evoforge.evaluators.sandbox import describe_isolation
from evoforge.evaluators.task import TaskError
from evoforge.evaluators.task_model import TaskChannel, TaskModelUsage, attach_channel
from evoforge.evaluators.task_model_cache import CACHE_FILE
from evoforge.evaluators.warm import WARM
from evoforge.flows.adaptive import AdaptiveController
from evoforge.flows.budget import Budget
from evoforge.flows.engine import Engine
from evoforge.flows.final_report import report_held_out
from evoforge.flows.gated_run import finish_gated, round_jobs
from evoforge.flows.policies import BarrierPolicy
from evoforge.flows.prefect_logs import attach_prefect_log, detach_prefect_log
from evoforge.flows.prefect_reconcile import crash_abandoned_runs
from evoforge.flows.prepare import Prepared, RunRequest, prepare
from evoforge.flows.progress import tick
from evoforge.flows.run_names import name_from_parameter, rename_flow_run, run_name
from evoforge.flows.runlog import attach_run_log, detach_run_log
from evoforge.flows.session import Session, open_session, sandbox_limits
from evoforge.flows.snapshot import after_close, build_snapshot
from evoforge.flows.stage_calls import StageCalls
from evoforge.flows.task_runners import runner_environment, task_runner_for
from evoforge.infra.failure_reasons import EVALUATION
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.infra.runfiles import read_json, write_atomic
from evoforge.stages.evaluation.job import InlineEvaluations
from evoforge.stages.evaluation.prefect_tasks import TaskEvaluations
from evoforge.stages.evaluation.slots import SlottedEvaluations
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.sinks.base import Event, EventKind

log = logging.getLogger("evoforge.run")


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
        sys.stderr.write("\n[evoforge] stopping: writing what is left to record (Ctrl+C again to abort)\n")
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


async def _evaluate_seed(session: Session, calls: StageCalls, pipeline: Pipeline) -> None:
    """Evaluate the task's initial program (and tune its knobs) before anything else runs: it
    passes through every stage that says it runs on the seed."""
    if session.seed_item is None:
        return
    item, ctx = session.seed_item, session.ctx
    for stage in pipeline.stages:
        if stage.runs_on_seed and stage.enabled(ctx.config) and not stage.skips(item, ctx):
            result = await calls.run(stage, item)
            item.apply(result.node, result.updates)
    assert item.node is not None
    _refuse_erring_seed(item.node, ctx.task.search_level, ctx.config.guard.accept_failing_seed)
    session.head.finished(item)
    if item.node.status != EVALUATED:
        raise SeedFailed(f"the initial program of '{session.ctx.task.name}' failed its evaluation: "
                         f"{item.node.error}")


def _last_snapshot(snapshot: Callable[[str], dict[str, Any]], run_state: str,
                   session: Session) -> dict[str, Any]:
    """The last snapshot; one that cannot be built is counted and logged (run.log), and the close
    that follows goes on with the state's counters alone."""
    try:
        session.hub.sync(60)  # every record the run made counted in it (the per-model accounting)
        return snapshot(run_state)
    except Exception as exc:
        log.exception("could not build the final snapshot")
        session.hub.count_failure("snapshot", exc)
        stats = session.state.stats
        return {"status": {"state": run_state, "evaluations": stats.evaluations}, "leaderboard": [],
                "leaderboard_md": ""}


def _refuse_erring_seed(node: Node, level: str, accept: bool) -> None:
    """Fail a seed whose evaluator reported an error beside its score, unless told to accept it
    (OpenEvolve evolves from it silently); a rerun evaluates a failed seed again."""
    reported = reported_error(node.artifacts) if node.status == EVALUATED else ""
    if reported and not accept:
        node.status, node.failed_stage, node.reason = FAILED, "engineer", EVALUATION
        node.error = (f"it scored {node.score(level)} but its evaluator reported error: {reported} "
                      f"(pass --accept-failing-seed, or guard.accept_failing_seed: true, to evolve from it)")


async def run_prepared(prepared: Prepared) -> dict[str, Any]:
    """Check the LLM once, then run the evolution flow on the prepared run (the CLI's path)."""
    await prepared.check_llm(announce=True)
    try:
        flow_fn = evolution_flow(prepared).with_options(task_runner=task_runner_for(prepared.request))
        async with runner_environment(prepared.request):
            return await flow_fn(prepared.request)
    finally:
        await prepared.llm.close()
        if prepared.analysis_llm is not None:
            await prepared.analysis_llm.close()


def resume_task_model(channel: TaskChannel, run_dir: Path) -> None:
    """Keep the task model's outputs in the run folder, and take over what earlier sessions of the
    run left: their outputs (no case paid twice) and their usage (the run's totals in status)."""
    loaded = channel.cache.open(run_dir / CACHE_FILE)
    earlier = (read_json(run_dir / "status.json") or {}).get("task_model")
    if isinstance(earlier, dict):
        channel.usage.add(TaskModelUsage(**{k: v for k, v in earlier.items()
                                            if k in TaskModelUsage.__dataclass_fields__}))
    if loaded or earlier:
        log.info("task model: %d outputs of earlier sessions cached; their usage %s", loaded, earlier)


def evolution_flow(prepared: Prepared) -> Flow[[RunRequest], dict[str, Any]]:
    """The evolution flow over `prepared` (called with another request, it prepares that one)."""

    @flow(name="evoforge-run", persist_result=False, flow_run_name=partial(name_from_parameter, "request"))
    async def evolution_run(request: RunRequest) -> dict[str, Any]:
        """Evolve the task's program until the budget is spent; returns the final status."""
        ready = prepared if prepared.request == request else prepare(request)
        return await _evolve(ready)

    return evolution_run


async def _evolve(prepared: Prepared) -> dict[str, Any]:
    """The evolution flow's body: open the session, run it, close it."""
    request = prepared.request
    await prepared.check_llm()
    cfg, task, llm = prepared.config, prepared.task, prepared.llm
    prepared.run_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - startup, nothing runs yet
    if prepared.task_model is not None:  # its task model, reached from this process
        attach_channel(task, prepared.task_model)
    if isinstance(prepared.task_model, TaskChannel):  # a text task: its val split, run by its task model
        cases = prepared.task_model.module.ids("val")
    else:
        cases = (await list_cases(task, limits=sandbox_limits(task, cfg, prepared.run_dir),
                                  scratch_root=prepared.run_dir) if task.case_based else None)
    session = open_session(task, cfg, prepared.run_dir, llm, prepared.workspace, prepared.pipeline,
                           cases=cases, cognition=prepared.cognition, analysis_llm=prepared.analysis_llm,
                           cognition_reads=prepared.cognition_reads,
                           evaluations=_evaluations(prepared))
    handler = attach_run_log(session.paths.log)
    api_log = attach_prefect_log()  # evoforge's INFO lines in the flow run's Logs tab
    try:
        if isinstance(prepared.task_model, TaskChannel):
            resume_task_model(prepared.task_model, prepared.run_dir)
        await rename_flow_run(run_name(task.name, session.ctx.run_id))  # a new folder has its id now
        await crash_abandoned_runs(request.run_dir)  # flow runs of killed sessions: CRASHED, not RUNNING
        return await _run_session(session, prepared)
    finally:
        if isinstance(prepared.task_model, TaskChannel):
            prepared.task_model.cache.close()
        await detach_prefect_log(api_log)
        detach_run_log(handler)


def _evaluations(prepared: Prepared) -> SlottedEvaluations:
    """The run's evaluation runner: Prefect task runs (or inline), behind as many slots as the
    evaluating stage starts with workers."""
    cfg, pipeline = prepared.config, prepared.pipeline
    runner = TaskEvaluations(cfg.engine.executor) if prepared.request.prefect_tasks else InlineEvaluations()
    evaluating = [s for s in pipeline.stages if s.evaluates and s.enabled(cfg)]
    return SlottedEvaluations(runner, evaluating[0].workers(cfg).initial if evaluating else 1)


async def _run_session(session: Session, prepared: Prepared) -> dict[str, Any]:
    cfg, task, llm, request = prepared.config, prepared.task, prepared.llm, prepared.request
    ctx, state, head, pipeline = session.ctx, session.state, session.head, prepared.pipeline
    stop = asyncio.Event()
    _install_stop_handlers(stop)
    calls = StageCalls(ctx, task_runs=request.prefect_tasks and cfg.engine.task_runs == "stages")
    budget = Budget(cfg.budget, state.stats, spending=prepared.spending, extra=ctx.extra_evals)
    policy = BarrierPolicy() if cfg.engine.mode == "sync" else None  # None: the engine's AsyncPolicy
    adaptive = cfg.adaptive.enabled and cfg.engine.mode == "async"
    controller = AdaptiveController(cfg.adaptive) if adaptive else None
    engine = Engine(ctx, head, budget, pipeline, calls, stop, policy, controller)
    session.hub.on_fatal = engine.fail  # a sink thread's own failure stops the run like any other
    log.info("run %s of %s in %s: mode %s, backend %s %s, stages %s, %d resumed items, cognition %s",
             ctx.run_id, task.name, prepared.run_dir, cfg.engine.mode, llm.name, llm.model,
             " -> ".join(f"{name}({engine.pools[name].bounds.initial})" for name in engine.stage_names()),
             len(session.resumed),
             f"{prepared.cognition.count()} items ({prepared.cognition.embedder.name})"
             if prepared.cognition is not None else "off")
    sandbox_isolation = describe_isolation(cfg.sandbox.isolate)
    log.info("sandbox: user %(user)s; network %(network)s; filesystem %(filesystem)s; "
             "process limit %(process_limit)s", sandbox_isolation)
    for line in await off_loop(isolation_notices, cfg.sandbox.isolate):  # as printed at start
        log.warning("%s", line.removeprefix("[evoforge] "))
    facts = {"run_id": ctx.run_id, "task": task.name, "algorithm": cfg.engine.algorithm,
             "mode": cfg.engine.mode, "backend": llm.name, "model": llm.model, "started_at": time.time(),
             "max_evals": cfg.budget.max_evals,
             "mlflow_run_id": session.tracker.parent_run_id if session.tracker else None}

    def snapshot(state_name: str = "running") -> dict[str, Any]:
        built = build_snapshot(state, session.hub, task.name,
                               {**facts, "state": state_name, "stop_reason": budget.stop_reason(),
                                "spending": prepared.spending.status() if prepared.spending else None,
                                "task_model": (prepared.task_model.usage.as_dict()
                                               if prepared.task_model else None),
                                "sandbox": {**sandbox_isolation, **WARM.describe(cfg.sandbox.warm)},
                                **ctx.evaluations.timing()},
                               engine.gauges(), session.accounting.as_dict())
        session.hub.emit(Event(EventKind.SNAPSHOT, pool_version=state.pool.v, payload=built))
        return built

    def check_wall() -> None:
        if cfg.budget.max_wall_s is not None and budget.stop_reason() == "max_wall_s reached":
            stop.set()

    def ticker():  # refreshes status.json and enforces max_wall_s, so it runs even when quiet
        return tick(lambda: snapshot()["status"], cfg.engine.progress_interval_s, cfg.budget.max_evals,
                    on_tick=check_wall, show=not request.quiet)

    run_state, mlflow_status = "failed", "FAILED"
    final: dict[str, Any] = {}
    try:
        await _evaluate_seed(session, calls, pipeline)
        snapshot()
        await engine.run(session.resumed, background=[ticker], rounds=round_jobs(engine, session))
        run_state = "interrupted" if stop.is_set() and budget.stop_reason() is None else "finished"
        mlflow_status = "KILLED" if run_state == "interrupted" else "FINISHED"
        if run_state == "finished":
            await finish_gated(session, engine)
            await report_held_out(session)  # the winners' held-out scores, in their own table
    except Exception:
        log.exception("the run failed")
        raise
    finally:
        _remove_stop_handlers()
        log.info("run %s %s: %s", ctx.run_id, run_state, budget.stop_reason())
        last = _last_snapshot(snapshot, run_state, session)
        session.close(mlflow_status, last)  # every sink records what is left, then closes
        final = {**last["status"], **after_close(session.hub)}
        write_atomic(session.paths.status, json.dumps(final, indent=2, default=str) + "\n")
    final["best_program"] = str(session.paths.best_dir / session.ctx.task.artifact.stored_root())
    return final
