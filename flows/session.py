"""Open a run folder: create it, or rebuild the pool, counters and sampler from its node database."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evoforge.cognition.store import CognitionBase
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task
from evoforge.evaluators.warm import WARM
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.nodes import EVALUATED, PROPOSED, SPECULATIVE, Node, new_node_id
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths, write_atomic
from evoforge.infra.tracking import ChildRun, Tracker, tracking_target
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.population.case_order import CaseOrder
from evoforge.stages.population.history import NEW_BEST, PoolHistory
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.repeats import RepeatMemo
from evoforge.stages.population.stats import RunStats
from evoforge.stages.reports.run_report import RunFacts, write_report
from evoforge.stages.rounds.branch_shares import BranchShares
from evoforge.stages.rounds.records import PLANS_META, PROMOTIONS_META
from evoforge.stages.sample import rebuild_sampler
from evoforge.stages.sample.resume import SAMPLER_STATE_META, sampler_state
from evoforge.stages.sinks.commit import Committer
from evoforge.stages.sinks.mlflow_runs import candidate_run
from evoforge.stages.sinks.model_usage import ModelUsageTable


class RunDirError(ValueError):
    """The run folder cannot be used for this run (user error, one line)."""


@dataclass
class Session:
    """Everything one invocation of a run holds open."""

    ctx: StageContext
    store: NodeStore
    committer: Committer
    paths: RunPaths
    tracker: Tracker | None
    resumed: list[Item]
    seed_item: Item | None  # the initial program, still to be evaluated

    def close(self, status: str = "FINISHED") -> None:
        """Write what is buffered, then close the stores; each is closed even if a write fails."""
        try:
            self.committer.flush()
            self.store.set_meta("wall_s", self.committer.wall_s())
            self.store.set_meta(SAMPLER_STATE_META, sampler_state(self.ctx.sampler))
            self.report()
            if self.tracker is not None and self.paths.leaderboard.is_file():
                self.tracker.log_text_on_parent(self.paths.leaderboard.read_text(), "leaderboard.md")
            if self.tracker is not None:  # the run's outcome on its parent run, as files
                for path, folder in ((self.paths.best_program, "best"), (self.paths.config, None)):
                    if path.is_file():
                        self.tracker.log_file_on_parent(path, folder)
        finally:
            WARM.close_all()  # the run's fork servers (a later run in this process starts its own)
            self.store.close()
            if self.tracker is not None:
                self.tracker.close(status=status)


    def report(self) -> str:
        """Write report.md with its plots (for a gated run the final scores and level comparisons
        come first) and log them on the MLflow parent run; returns the text."""
        task, rounds, winner = self.ctx.task, self.committer.rounds, self.committer.pool.winner()
        facts = RunFacts(task.name, task.direction == "maximize", task.search_level, task.gated)
        text, drawn = write_report(self.paths, self.store, facts, winner.id if winner else None,
                                   rounds.plans, rounds.promotions)
        if self.tracker is not None:
            self.tracker.log_text_on_parent(text, "report.md")
            for figure in drawn:  # report.md's image links resolve beside it in the artifacts
                self.tracker.log_file_on_parent(figure.path, "report")
        return text


def _limits(task: Task, cfg: RunConfig) -> SandboxLimits:
    return SandboxLimits(
        timeout_s=cfg.sandbox.timeout_s or task.timeout_s,
        memory_mb=cfg.sandbox.memory_mb,
        max_procs=cfg.sandbox.max_procs,
        max_open_files=cfg.sandbox.max_open_files,
        isolate=cfg.sandbox.isolate,
        expose=tuple(cfg.sandbox.expose),
        warm=cfg.sandbox.warm,
    )


def _candidate_runs(nodes: list[Node], level: str, paths: RunPaths) -> dict[str, ChildRun]:
    """The MLflow run of each candidate with an outcome, as the database has it (for a resume)."""
    runs = {}
    for node in nodes:
        if node.status.terminal:
            trials = paths.param_trials(node.id)
            runs[node.id] = candidate_run(node, level, trials.read_text() if trials.is_file() else None)
    return runs


def _tracker(cfg: RunConfig, store: NodeStore, workspace: Path, task: Task, run_id: str,
             expected: Callable[[], dict[str, ChildRun]]) -> Tracker | None:
    if not cfg.tracking.mlflow:
        return None
    target = tracking_target(workspace, task.name, cfg.tracking.tracking_uri, cfg.tracking.experiment)
    tracker = Tracker(target.uri, target.experiment, target.artifact_root, run_name=f"{task.name}-{run_id}",
                      parent_run_id=store.get_meta("mlflow_parent_run_id"),
                      tags={"evoforge.run_id": run_id, "evoforge.task": task.name})
    resumed = store.get_meta("mlflow_parent_run_id") is not None
    parent = tracker.wait_ready()
    if parent:
        store.set_meta("mlflow_parent_run_id", parent)
        settings = {"seed": cfg.seed, "mode": cfg.engine.mode, "max_evals": cfg.budget.max_evals,
                    "llm_base_url": cfg.llm.base_url or ("several" if cfg.llm.endpoints else "offline"),
                    "llm_model": cfg.llm.model or ""}
        # params are set once (MLflow refuses a changed value); a resumed run's settings may differ
        # (a scheduled run raises max_evals), so each session records its own as tags as well
        tracker.log_parent(params=None if resumed else {"task": task.name, "run_id": run_id, **settings},
                           tags={f"evoforge.{k}": v for k, v in settings.items()})
        if resumed:  # a killed session may have left runs RUNNING, or missing, or one too many
            tracker.reconcile(expected())
    return tracker


def rebuild_pool(nodes: list[Node], maximize: bool, v: int, judge_weight: float,
                 level: str = "full") -> tuple[Pool, PoolHistory]:
    """The pool, and its new-best history replayed in the order evaluations finished."""
    finished = sorted(nodes, key=lambda n: n.evaluated_at or n.created_at)
    seed = next((n for n in nodes if n.origin == "seed" and n.score(level) is not None), None)
    scale = (abs(seed.score(level)) or 1.0) if seed is not None else 1.0  # type: ignore[arg-type]
    pool = Pool.rebuild(finished, maximize, v, judge_weight=judge_weight, judge_scale=scale,
                        level=level)
    history, best, version = PoolHistory(), None, 0
    for node in finished:
        if node.status == EVALUATED and node.score(level) is not None and pool.better(node, best):
            best, version = node, version + 1
            history.record(version, NEW_BEST, node)
    return pool, history


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


def open_session(task: Task, cfg: RunConfig, run_dir: Path, llm: LLMBackend,
                 workspace: Path, cases: list[str] | None = None,
                 cognition: CognitionBase | None = None) -> Session:
    """Create or resume the run in `run_dir`."""
    paths = RunPaths(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    store = NodeStore(paths.db)
    known_task = store.get_meta("task")
    if known_task is not None and known_task != task.name:
        store.close()
        raise RunDirError(f"{run_dir} holds a run of task '{known_task}', not '{task.name}'")
    run_id = store.get_meta("run_id") or uuid.uuid4().hex[:8]
    store.set_meta("run_id", run_id)
    store.set_meta("task", task.name)
    store.set_meta("direction", task.direction)
    write_atomic(paths.config, json.dumps(cfg.public_dict(), indent=2) + "\n")

    nodes = store.all()
    by_id = {n.id: n for n in nodes}
    maximize = task.direction == "maximize"
    pool, history = rebuild_pool(nodes, maximize, v=store.get_meta("pool_version", 0),
                                 judge_weight=cfg.judge.weight, level=task.search_level)
    case_order = None
    if cases:
        saved = store.get_meta("case_order")
        case_order = (CaseOrder.from_state(saved) if saved and sorted(saved.get("order", [])) == sorted(cases)
                      else CaseOrder(cases, window=cfg.speculation.reorder_window))
    sampler = rebuild_sampler(cfg.search, nodes, pool)
    stats = RunStats.rebuild(nodes)
    tracker = _tracker(cfg, store, workspace, task, run_id,
                       lambda: _candidate_runs(nodes, task.search_level, paths))
    committer = Committer(store, paths, pool, sampler, stats, task.name, tracker,
                          wall_s_before=store.get_meta("wall_s", 0.0), history=history,
                          case_order=case_order, lineage={n.id: n.parent_id for n in nodes},
                          flush_interval_s=cfg.engine.commit_interval_s,
                          cognition=cognition if cfg.analyze.write_back else None, run_id=run_id,
                          dedupe_similarity=cfg.cognition.dedupe_similarity, llm=llm,
                          models=ModelUsageTable.rebuild(nodes, pool, cfg.llm.prices,
                                                        observe=llm.observe))
    committer.rounds.restore(store.get_meta(PLANS_META, []), store.get_meta(PROMOTIONS_META, []))
    paths.scratch.mkdir(exist_ok=True)
    ctx = StageContext(run_id=run_id, task=task, config=cfg, llm=llm, pool=pool, sampler=sampler,
                       rng=random.Random(f"{cfg.seed}-{stats.proposals}"), limits=_limits(task, cfg),
                       scratch=paths.scratch, history=history, case_order=case_order,
                       cognition=cognition, optuna_url=f"sqlite:///{paths.optuna_db.resolve()}",
                       plan=committer.rounds.plan, shares=BranchShares.rebuild(nodes),
                       repeats=RepeatMemo.rebuild(nodes, task))
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
    resumed = _resumed_items(nodes, by_id, seeds[0] if seeds else None)
    return Session(ctx, store, committer, paths, tracker, resumed, seed_item)
