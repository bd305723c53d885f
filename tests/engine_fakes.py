"""Fake stages and a harness to run the stage engine without Prefect, an LLM or a sandbox."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.flows.adaptive import AdaptiveController
from evoforge.flows.budget import Budget
from evoforge.flows.engine import Engine
from evoforge.flows.head import Head
from evoforge.flows.policies import Policy
from evoforge.flows.run_state import RunState
from evoforge.flows.stage_calls import StageCalls
from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import EVALUATED, PROPOSED, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.pipeline.run_view import ReleaseChannel, RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult, WorkerBounds
from evoforge.stages.population.item import Item
from evoforge.stages.sinks.hub import SinkHub
from evoforge.stages.sinks.node_db import NodeDatabase

TASK = load_task("circle_packing")


@dataclass
class Log:
    """What the fake stages saw, in order: (event, stage, node id)."""

    events: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, event: str, stage: str, node_id: str) -> None:
        self.events.append((event, stage, node_id))


class FakeResearch(Stage):
    """Makes a unique candidate after `delay` seconds (or hangs forever with delay=None)."""

    name, checkpoint = "research", True

    def __init__(self, log: Log, delay: float | None = 0.0, workers: int = 2, high: int | None = None,
                 observe: Callable[[], None] | None = None):
        self.log, self.delay, self.n, self.high, self.observe = log, delay, workers, high, observe

    def workers(self, cfg: RunConfig) -> WorkerBounds:
        return WorkerBounds(self.n, 1, self.high or self.n)

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        node = new_candidate(item, ctx)
        self.log.add("start", self.name, node.id)
        if self.observe is not None:
            self.observe()
        if self.delay is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay)
        node.code = item.parent.code + f"\n# {node.id}\n"
        node.diff = f"--- parent\n+++ candidate\n+# {node.id}\n"
        node.status, node.llm_s = PROPOSED, self.delay
        self.log.add("end", self.name, node.id)
        return StageResult(node)


class FakeEngineer(Stage):
    """Scores a candidate after `delay` seconds; `fail_every` raises on every k-th item."""

    name, evaluates = "engineer", True

    def __init__(self, log: Log, delay: float = 0.0, workers: int = 2, fail_every: int = 0,
                 observe: Callable[[], None] | None = None):
        self.log, self.delay, self.n, self.fail_every, self.observe = log, delay, workers, fail_every, observe
        self.count = 0

    def workers(self, cfg: RunConfig) -> WorkerBounds:
        return WorkerBounds(self.n, 1, max(self.n, 4))

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        assert item.node is not None
        self.count += 1
        self.log.add("start", self.name, item.node.id)
        if self.observe is not None:
            self.observe()
        if self.fail_every and self.count % self.fail_every == 0:
            raise RuntimeError(f"boom on item {self.count}")
        await asyncio.sleep(self.delay)
        node = item.node.copy(status=EVALUATED, score_full=1.0 + 0.001 * self.count,
                              evaluated_at=1.0 + self.count, eval_s=self.delay)
        self.log.add("end", self.name, node.id)
        return StageResult(node)


class NoteAnalysis(Stage):
    """A plug-in spliced in after the engineer: writes an analysis on every candidate."""

    name, after = "analyze", "engineer"

    def __init__(self, log: Log):
        self.log = log

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        assert item.node is not None
        self.log.add("start", self.name, item.node.id)
        node = item.node.copy()
        AnalysisData.of(node).report = f"analysed {item.node.id} ({item.node.status})"
        return StageResult(node)


class Failing(Stage):
    """A stage whose run fails: `to` COMMIT is never reached."""

    name = "engineer"

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        raise RuntimeError("never")


@dataclass
class Harness:
    """An engine over fake stages, with the real head, run state, pool, sampler and a DuckDB node
    database written by its sink."""

    engine: Engine
    store: NodeStore
    head: Head
    hub: SinkHub
    stop: asyncio.Event
    seed: Node

    async def run(self, limit_s: float = 20.0, background: Sequence[Callable[[], Any]] = ()) -> None:
        await asyncio.wait_for(self.engine.run(background=background), limit_s)

    @property
    def state(self) -> RunState:
        return self.head.state

    def nodes(self) -> list[Node]:
        """Every node as the node database has it (after the sinks recorded everything)."""
        assert self.hub.sync(30), "the sinks did not catch up"
        return self.store.all()

    def close(self) -> None:
        self.hub.close()


def pipeline_of(stages: Sequence[Stage]) -> Pipeline:
    """The stages as a pipeline: those naming no `after` in the order given, the rest placed."""
    return Pipeline(tuple(s for s in stages if s.after is None)).with_plugins(
        [s for s in stages if s.after is not None])


def make_harness(tmp_path: Path, stages: Sequence[Stage], max_evals: int = 12,
                 policy: Policy | None = None, controller: AdaptiveController | None = None,
                 config: dict | None = None, store: NodeStore | None = None,
                 view: dict[str, Any] | None = None) -> Harness:
    """A harness over `stages`; `view`: fields of the run's view to set (it cannot change later)."""
    cfg = RunConfig.model_validate({"budget": {"max_evals": max_evals}, **(config or {})})
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0,
                origin="seed", evaluated_at=0.5)
    state = RunState.rebuild([seed], {}, TASK, cfg)
    store = store or NodeStore(tmp_path / "nodes.duckdb")
    store.put(seed)
    hub = SinkHub([NodeDatabase(store)])
    hub.start()
    head = Head(state, hub, cfg.staleness.policy)
    ctx = RunView("r", TASK, cfg, OfflineBackend(), state.pool, state.sampler, random.Random(0),
                  SandboxLimits(), tmp_path, history=state.history, rounds=state.rounds, shares=state.shares,
                  release=ReleaseChannel(), repeats=state.repeats, **(view or {}))
    stop = asyncio.Event()
    engine = Engine(ctx, head, Budget(cfg.budget, state.stats), pipeline_of(stages), StageCalls(ctx),
                    stop, policy, controller)
    hub.on_fatal = engine.fail
    return Harness(engine, store, head, hub, stop, seed)


__all__ = ["COMMIT", "FakeEngineer", "FakeResearch", "Failing", "Harness", "Log", "NoteAnalysis",
           "make_harness", "pipeline_of"]
