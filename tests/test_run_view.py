"""The run's view is read-only and complete when built: nothing can be set on it afterwards, the
engine receives speculative releases through the channel the view was given, and a promotion
round's candidates reach the head through the engine's door and its promote stage pool, never
through a registry."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import random
from pathlib import Path

import pytest

import evoforge.flows.evolve as evolve
import evoforge.flows.prepare as prepare
import evoforge.flows.promotion_flow as promotion_flow
from evoforge.evaluators.evaluation import EvalOutcome
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.evaluators.task_yaml import EvalLevel
from evoforge.flows.budget import Budget
from evoforge.flows.engine import Engine
from evoforge.flows.promotion_flow import promotion_round
from evoforge.flows.stage_calls import StageCalls
from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import EVALUATED, SPECULATIVE, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.evaluation.job import EvalReport, EvalRequest, EvaluationRunner
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.pipeline.run_view import ReleaseChannel, RunView
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.promote import Promote
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.rounds.plan_data import PlanData
from evoforge.stages.sample import make_sampler
from tests.engine_fakes import FakeEngineer, FakeResearch, Log, make_harness
from tests.head_fakes import make_head

TASK = load_task("circle_packing")


def _view(**fields) -> RunView:
    cfg = RunConfig()
    return RunView("r", TASK, cfg, OfflineBackend(), Pool(), make_sampler(cfg.search), random.Random(0),
                   SandboxLimits(), Path("."), **fields)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(RunView)])
def test_no_field_of_the_view_can_be_assigned(name):
    view = _view()
    before = getattr(view, name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(view, name, None)
    assert getattr(view, name) is before


def test_the_plan_is_the_heads_and_cannot_be_set_on_the_view():
    view = _view()
    with pytest.raises(AttributeError):
        view.plan = None  # type: ignore[misc]
    assert view.plan is None and view.rounds.plans == []


def test_the_release_channel_takes_one_receiver_and_refuses_a_release_before_it():
    channel = ReleaseChannel()
    with pytest.raises(RuntimeError, match="no engine"):
        channel(None, None)  # type: ignore[arg-type]
    got = []
    channel.connect(lambda item, node: got.append((item, node)))
    with pytest.raises(RuntimeError, match="already"):
        channel.connect(lambda item, node: None)
    channel("item", "node")  # type: ignore[arg-type]
    assert got == [("item", "node")]


def test_a_release_through_the_views_channel_reaches_the_pool_through_the_engine(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log), FakeEngineer(log)])
    view = h.engine.ctx
    assert view.release is not None
    parent = h.seed
    node = Node(id="cand", run_id="r", code="x = 1\n", parent_id=parent.id, status=SPECULATIVE,
                score_full=None, score_partial=1.5)
    item = Item(v_i=0, parent=parent, node=node.copy())  # the engineer's item, mid-evaluation
    view.release(item, node)
    h.close()
    assert h.state.pool.get("cand") is node and h.state.stats.speculative_released == 1
    assert h.engine.door.applied["released"] == 1


class _FullScores(EvaluationRunner):
    """Scores every request at the level it asks for, from a table; records what it ran."""

    def __init__(self, scores: dict[str, float | None]) -> None:
        self.scores, self.requests = scores, []

    async def run(self, request: EvalRequest, release) -> EvalReport:
        self.requests.append(request)
        score = self.scores[request.node_id]
        outcome = EvalOutcome(ok=score is not None, score=score, metrics={}, artifacts={},
                              error=None if score is not None else "crashed at full", seconds=2.0,
                              cascade_step=None, cpu_s=1.5)
        return EvalReport(outcome=outcome)


def _pilot(i: int, pilot: float) -> Node:
    return Node(id=f"n{i}", run_id="r", code=f"x = {i}\n", status=EVALUATED, score_pilot=pilot,
                owned={"plan": PlanData(branch="B1")})


class _Crashes(_FullScores):
    """Raises inside the evaluation of the nodes it is told, as a broken runner would."""

    def __init__(self, scores: dict[str, float | None], crash: set[str]) -> None:
        super().__init__(scores)
        self.crash = crash

    async def run(self, request: EvalRequest, release) -> EvalReport:
        if request.node_id in self.crash:
            raise RuntimeError("sandbox gone")
        return await super().run(request, release)


def _promotion_rig(tmp_path, runner: EvaluationRunner):
    """A head over three pilot nodes and an engine with the promote stage, on `runner`."""
    cfg = RunConfig.model_validate({"promotion": {"top_k": 2}})
    rig = make_head(tmp_path, [_pilot(0, 0.95), _pilot(1, 0.90), _pilot(2, 0.85)], cfg=cfg, level="pilot")
    task = dataclasses.replace(TASK, levels=(EvalLevel("pilot", 0.1), EvalLevel("full", None)))
    state = rig.state
    view = RunView("r", task, cfg, OfflineBackend(), state.pool, state.sampler, random.Random(0),
                   SandboxLimits(), tmp_path, history=state.history, evaluations=runner, rounds=state.rounds,
                   release=ReleaseChannel())
    pipeline = Pipeline((FakeResearch(Log()),), side=(Promote(),))
    engine = Engine(view, rig.head, Budget(cfg.budget, state.stats), pipeline, StageCalls(view),
                    asyncio.Event())
    return rig, view, engine


def _promote_round(view: RunView, engine: Engine) -> dict:
    """Round 1, run through the engine's stage pools (as the last promotion is)."""
    got: dict = {}

    async def job() -> None:
        got.update(await promotion_round(view, engine.door, 1))

    asyncio.run(engine.finish(job))
    return got


def test_a_promotion_rounds_results_reach_the_head_through_the_engines_promote_pool(tmp_path):
    runner = _FullScores({"n0": 0.70, "n1": 0.92})
    rig, view, engine = _promotion_rig(tmp_path, runner)
    state = rig.state
    v, evaluations = state.pool.v, state.stats.evaluations
    summary = _promote_round(view, engine)
    stored = rig.recorded()
    rig.close()
    assert summary["promoted"] == ["n0", "n1"]  # the top 2 by pilot
    assert [(r.node_id, r.level) for r in runner.requests] == [("n0", "full"), ("n1", "full")]
    assert engine.door.applied["entered"] == 2  # through the engine's door ...
    assert engine.pools["promote"].finished == 2  # ... and the promote stage's pool ...
    assert state.stats.promotions == 2 and state.rounds.promotions[-1].round == 1  # ... applied by the head
    assert state.stats.evaluations == evaluations  # a promotion is no new evaluation
    assert state.pool.get("n1").score_full == 0.92 and PromotionData.peek(state.pool.get("n0")).round == 1
    assert state.pool.winner().id == "n1" and state.pool.v == v + 1
    assert stored["n1"].score_full == 0.92  # the head's events, recorded by the sinks
    assert view.pool is state.pool and view.rounds is state.rounds  # the view saw it without being set


def test_an_error_in_the_promote_stage_fails_the_promotion_not_the_pooled_node(tmp_path):
    rig, view, engine = _promotion_rig(tmp_path, _Crashes({"n0": 0.70}, crash={"n1"}))
    summary = _promote_round(view, engine)
    rig.close()
    n1 = rig.state.pool.get("n1")
    assert summary["promoted"] == ["n0", "n1"]  # the round closed with its failed item too
    assert n1.status == EVALUATED and n1.score_full is None and PromotionData.peek(n1).round == 1
    assert "sandbox gone" in n1.artifacts["promotion_error"]
    assert rig.state.pool.winner().id == "n0" and rig.state.stats.failed == 0


def test_no_module_holds_live_runs_or_a_handed_over_run():
    assert not hasattr(promotion_flow, "live_runs") and not hasattr(promotion_flow, "LiveRun")
    assert not hasattr(prepare, "_HANDED_OVER") and not hasattr(prepare, "hand_over")
    assert not hasattr(evolve, "evolution_run")  # the flow is built around each prepared run


HEAD_STATE = {"pool", "sampler", "history", "case_order", "shares", "rounds"}
CHANGES = {"add", "remove", "rescore", "on_node_added", "on_node_removed", "on_node_rescored", "record",
           "update", "note", "append", "extend", "pop", "clear"}


def _changes(source: str) -> list[str]:
    """The calls in `source` that change the head's state through the view (`ctx.pool.add(...)`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value  # ctx.<state>.<change>(...) or ctx.<state>.<field>.<change>(...)
        while isinstance(owner, ast.Attribute) and not (isinstance(owner.value, ast.Name)
                                                        and owner.value.id == "ctx"):
            owner = owner.value
        if isinstance(owner, ast.Attribute) and owner.attr in HEAD_STATE and node.func.attr in CHANGES:
            found.append(f"{node.lineno} ctx.{owner.attr}...{node.func.attr}()")
    return found


def test_no_stage_module_changes_the_heads_state_through_the_view():
    root = Path(__file__).resolve().parents[1] / "stages"
    found = {path.name: hits for path in sorted([*root.glob("*.py"), *(root / "algorithms").glob("*.py")])
             if (hits := _changes(path.read_text()))}
    assert found == {}
    probe = "ctx.pool.add(node)\nctx.rounds.plans.append(plan)\nctx.pool.get(node.id)\nctx.repeats.claim(k)\n"
    assert _changes(probe) == ["1 ctx.pool...add()", "2 ctx.rounds...append()"]  # the check sees them
