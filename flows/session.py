"""Open a run folder: create it, or resume it — the run state rebuilt from the node database in
one place (flows/run_state.py), and every sink caught up from it in one loop (the hub runs each
sink's `rebuild` on its thread before its first record). The run's read-only view (`RunView`)
is built here once, with every service it carries: nothing is set on it afterwards."""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evoforge.cognition.store import CognitionBase
from evoforge.cognition.workspace import person_of
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task
from evoforge.evaluators.warm import WARM
from evoforge.flows.head import Head
from evoforge.flows.run_state import RunState
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.factory import scheduled
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.nodes import EVALUATED, PROPOSED, SPECULATIVE, Node, new_node_id
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths, write_atomic
from evoforge.infra.timeline import Timeline
from evoforge.infra.tracking import Tracker, tracking_target
from evoforge.stages.evaluation.job import EvaluationRunner, InlineEvaluations
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.pipeline.run_view import ReleaseChannel, RunView
from evoforge.stages.plugins import plugin_sinks
from evoforge.stages.population.item import Item
from evoforge.stages.reports.run_report import RunFacts, held_out, held_out_cost, write_report
from evoforge.stages.sample.resume import SAMPLER_STATE_META, sampler_state
from evoforge.stages.sinks.base import Event, EventKind, Sink
from evoforge.stages.sinks.cognition_sink import CognitionWriteBack
from evoforge.stages.sinks.hub import SinkHub
from evoforge.stages.sinks.mlflow_sink import MlflowRecords
from evoforge.stages.sinks.model_usage import ModelAccounting, gains, model_metrics
from evoforge.stages.sinks.node_db import NodeDatabase
from evoforge.stages.sinks.prefect_sink import PrefectArtifacts
from evoforge.stages.sinks.registry_sink import RegistryRecords, RegistryTarget
from evoforge.stages.sinks.run_files import RunFiles

log = logging.getLogger("evoforge.session")

_META_KEYS = ("pool_version", "case_order", "plans", "promotions", "wall_s")
MLFLOW_PARENT_META = "mlflow_parent_run_id"


class RunDirError(ValueError):
    """The run folder cannot be used for this run (user error, one line)."""


@dataclass
class Session:
    """Everything one invocation of a run holds open."""

    ctx: RunView  # what stages, samplers and sinks read of the run
    state: RunState
    head: Head
    hub: SinkHub
    paths: RunPaths
    tracker: Tracker | None
    accounting: ModelAccounting
    store: NodeStore  # written by its sink's thread; read here through `reader()` only
    resumed: list[Item]
    seed_item: Item | None  # the initial program, still to be evaluated

    def close(self, status: str, snapshot: dict[str, Any]) -> None:
        """The end of the session: the report, the run's outcome on MLflow and Prefect, the last
        metadata; then every sink records what is left and closes (the node database last of its
        own records), even if writing the report fails. An interrupted run's report has no plots:
        Ctrl+C exits at once (`evoforge report` draws them)."""
        started = time.perf_counter()
        texts: dict[str, str] = {}
        draw = snapshot["status"].get("state") != "interrupted"
        try:
            texts["report.md"] = self.report(snapshot["status"].get("task_model"), draw=draw)
        finally:
            if self.paths.leaderboard.is_file():
                texts["leaderboard.md"] = self.paths.leaderboard.read_text()
            final = snapshot["status"]
            metrics = {k: v for k, v in final.items() if isinstance(v, (int, float)) and k in _ACCOUNTING}
            best = self.paths.best_dir / self.ctx.task.artifact.stored_root()
            winner = self.state.pool.winner()  # what the registry sink registers
            files = [(best, "best"), (self.paths.config, None)]
            files += [(self.paths.figures, "report")] if draw else []  # no earlier session's plots
            self.hub.emit(Event(EventKind.CLOSE, pool_version=self.state.pool.v,
                                meta={"wall_s": self.state.wall_s(),
                                      SAMPLER_STATE_META: sampler_state(self.state.sampler)},
                                payload={"status": status, "snapshot": snapshot, "texts": texts,
                                         "metrics": {**metrics, **model_metrics(final.get("models", {}))},
                                         "step": final.get("evaluations", 0), "files": files,
                                         "winner": winner.copy() if winner else None,
                                         "winner_level": winner and self.state.pool.winner_level(winner)}))
            reported = time.perf_counter()
            try:
                self.hub.close()
            finally:
                WARM.close_all()  # the run's fork servers (a later run in this process starts its own)
                log.info("session closed: report %.2f s, the sinks' last records %.2f s",
                         reported - started, time.perf_counter() - reported)

    def report(self, task_model: dict[str, float] | None = None, draw: bool = True) -> str:
        """Write report.md with its plots, unless `draw` is False (for a gated run the final scores
        and level comparisons come first; for a text or playbook task its test scores; `task_model`:
        the run's usage of its task model, if it has one); returns the text."""
        task, state = self.ctx.task, self.state
        winner = state.pool.winner()
        facts = RunFacts(task.name, task.direction == "maximize", task.search_level, task.gated, task.kind,
                         task_model)
        self.hub.sync(60)  # the held-out table as the node database has it now
        text, _ = write_report(self.paths, state.all_nodes(), held_out(self.store.reader()), facts,
                               winner.id if winner else None, state.rounds.plans, state.rounds.promotions,
                               draw=draw)
        return text


# the run's accounting as parent-run metrics at the end (status.json's names)
_ACCOUNTING = (
    "evaluations", "proposals", "nodes_evaluated", "nodes_failed", "candidates_per_min",
    "accepted_per_min", "proposals_per_min", "dropped_stale", "reflected", "patched", "pruned",
    "speculative_released", "confirmed", "rolled_back", "wasted_llm_s", "wasted_eval_s",
    "patched_llm_s", "tokens_in", "tokens_out", "llm_s", "eval_s", "eval_cpu_s", "trials", "promotions",
    "wall_s", "llm_pauses", "llm_paused_s", "records_lag_s",
)


def sandbox_limits(task: Task, cfg: RunConfig, run_dir: Path | None = None) -> SandboxLimits:
    """The sandbox limits of the run's evaluations (whose candidates never see the workspace, nor
    ``run_dir``: every run's folder)."""
    hide = (str(Path(cfg.workspace).resolve()), *([str(run_dir.resolve())] if run_dir else []))
    return SandboxLimits(
        timeout_s=cfg.sandbox.timeout_s or task.timeout_s,
        memory_mb=cfg.sandbox.memory_mb,
        max_procs=cfg.sandbox.max_procs,
        max_open_files=cfg.sandbox.max_open_files,
        isolate=cfg.sandbox.isolate,
        expose=tuple(cfg.sandbox.expose),
        hide=hide,
        scratch_mb=cfg.sandbox.scratch_mb,
        warm=cfg.sandbox.warm,
    )


def _open_tracker(cfg: RunConfig, store: NodeStore, workspace: Path, task: Task, run_id: str
                  ) -> tuple[Tracker | None, Exception | None]:
    """The run's MLflow tracker with its parent run made (or reopened), or why there is none."""
    if not cfg.tracking.mlflow:
        return None, None
    target = tracking_target(workspace, task.name, cfg.tracking.tracking_uri, cfg.tracking.experiment)
    resumed = store.get_meta(MLFLOW_PARENT_META)
    tracker = Tracker(target.uri, target.experiment, target.artifact_root, run_name=f"{task.name}-{run_id}",
                      parent_run_id=resumed, tags={"evoforge.run_id": run_id, "evoforge.task": task.name})
    try:
        parent = tracker.open()
        settings = {"seed": cfg.seed, "mode": cfg.engine.mode, "max_evals": cfg.budget.max_evals,
                    "llm_base_url": cfg.llm.base_url or ("several" if cfg.llm.endpoints else "offline"),
                    "llm_model": cfg.llm.model or ""}
        # params are set once (MLflow refuses a changed value); a resumed run's settings may differ
        # (a scheduled run raises max_evals), so each session records its own as tags as well
        tracker.log_parent(params=None if resumed else {"task": task.name, "run_id": run_id, **settings},
                           tags={f"evoforge.{k}": v for k, v in settings.items()})
    except Exception as exc:  # counted as the MLflow sink's failure by the caller, shown in status
        return None, exc
    store.set_meta(MLFLOW_PARENT_META, parent)
    return tracker, None


def _resumed_items(nodes: list[Node], by_id: dict[str, Node], seed: Node | None) -> list[Item]:
    items = []
    for node in nodes:
        if node.status == SPECULATIVE:  # its confirmation was cut off: evaluate it again
            node.status, node.speculative_at, node.score_partial = PROPOSED, None, None
            node.evaluated_at = None
        if node.status == PROPOSED and node.origin != "seed":
            parent = by_id.get(node.parent_id or "") or seed
            if parent is not None:
                items.append(Item(v_i=node.pool_version, parent=parent, node=node))
    return items


def open_session(task: Task, cfg: RunConfig, run_dir: Path, llm: LLMBackend, workspace: Path,
                 pipeline: Pipeline, cases: list[str] | None = None,
                 cognition: CognitionBase | None = None,
                 analysis_llm: LLMBackend | None = None,
                 evaluations: EvaluationRunner | None = None,
                 cognition_reads: tuple[CognitionBase, ...] = ()) -> Session:
    """Create or resume the run in `run_dir`; `evaluations`: the run's evaluation runner (default:
    inline, on the flow's event loop)."""
    paths = RunPaths(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    store = NodeStore(paths.db)
    known_task = store.get_meta("task")
    if known_task is not None and known_task != task.name:
        store.close()
        raise RunDirError(f"{run_dir} holds a run of task '{known_task}', not '{task.name}'")
    run_id = store.get_meta("run_id") or uuid.uuid4().hex[:8]
    store.write([], {"run_id": run_id, "task": task.name, "direction": task.direction})
    write_atomic(paths.config, json.dumps(cfg.public_dict(), indent=2) + "\n")

    nodes = store.all()
    meta = {key: store.get_meta(key) for key in _META_KEYS if store.get_meta(key) is not None}
    state = RunState.rebuild(nodes, meta, task, cfg, cases, held_out_cost(store))
    maximize = task.direction == "maximize"
    for node, gain in gains(nodes, task.search_level, maximize):  # a bandit router resumes learnt
        if node.origin != "seed":
            llm.observe(node.model, gain)
    tracker, tracking_error = _open_tracker(cfg, store, workspace, task, run_id)
    paths.scratch.mkdir(exist_ok=True)
    run_base = (CognitionBase(run_dir / "cognition", cognition.embedder) if cognition is not None else None)
    llm = scheduled(llm, cfg)  # every call of the run through one scheduler per endpoint, by priority
    analysis_llm = scheduled(analysis_llm, cfg) if analysis_llm is not None else None
    ctx = RunView(run_id=run_id, task=task, config=cfg, llm=llm, pool=state.pool, sampler=state.sampler,
                  rng=random.Random(f"{cfg.seed}-{state.stats.proposals}"),
                  limits=sandbox_limits(task, cfg, run_dir), scratch=paths.scratch, history=state.history,
                  case_order=state.case_order, cognition=cognition, run_cognition=run_base,
                  read_cognition=cognition_reads,
                  evaluations=evaluations or InlineEvaluations(),
                  optuna_url=f"sqlite:///{paths.optuna_db.resolve()}", rounds=state.rounds,
                  shares=state.shares, release=ReleaseChannel(), repeats=state.repeats, paths=paths,
                  analysis_llm=analysis_llm)
    accounting = ModelAccounting(task.search_level, maximize, cfg.llm.prices)
    target = (tracking_target(workspace, task.name, cfg.tracking.tracking_uri, cfg.tracking.experiment)
              if tracker is not None else None)
    timeline = Timeline(paths.timeline, session=time.time())  # one line per snapshot, for the plots
    sinks: list[Sink] = [NodeDatabase(store), RunFiles(paths, timeline, task.artifact), accounting,
                         PrefectArtifacts(task.name, run_id, cfg.budget.max_evals, target)]
    if tracker is not None:
        sinks.append(MlflowRecords(tracker, task.search_level, paths, task.artifact))
        if cfg.tracking.registry:
            sinks.append(RegistryRecords(RegistryTarget(tracker.uri, f"{task.name}-{run_id}",
                                                        tracker.parent_run_id or ""), task, paths))
    if run_base is not None and cfg.analyze.write_back:
        sinks.append(CognitionWriteBack(cognition, run_base, run_id, task.name,
                                        cfg.cognition.dedupe_similarity, person_of(cfg.cognition)))
    for stage in pipeline.stages:
        if stage.enabled(cfg):
            sinks.extend(stage.sinks(ctx))
    sinks.extend(plugin_sinks(sinks, run_id=run_id, task=task, config=cfg, paths=paths))  # the plug-ins'
    hub = SinkHub(sinks, rebuild_from=nodes if nodes else None)
    if tracking_error is not None:
        hub.count_failure("mlflow", tracking_error)
    hub.start()
    head = Head(state, hub, cfg.staleness.policy, llm)

    seeds = [n for n in nodes if n.origin == "seed"]
    seed_item = None
    if not seeds:
        seed = Node(id=new_node_id(), run_id=run_id, code=task.initial_code, origin="seed",
                    backend="seed", model="", motivation="the task's initial program")
        seed_item = Item(v_i=0, parent=seed, node=seed)
    elif seeds[0].status != EVALUATED:  # it failed last time: the task may have been fixed since
        seed = seeds[0]
        seed.code = task.initial_code
        seed_item = Item(v_i=0, parent=seed, node=seed)
    resumed = _resumed_items(nodes, {n.id: n for n in nodes}, seeds[0] if seeds else None)
    return Session(ctx, state, head, hub, paths, tracker, accounting, store, resumed, seed_item)
