"""Analyses spend the LLM's spare capacity: with slack every candidate is analysed by the LLM; when
the LLM binds, new bests always are, the most telling others may be (ranked, refusable), and the
rest get the deterministic summary, marked on the node and counted in status.json and report.md."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.scheduler import PROPOSE, Ask, ScheduledBackend, Scheduler
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.analysis_data import BY_LLM, BY_OFFLINE, BY_SUMMARY, AnalysisData
from evoforge.stages.analysis_value import (
    FIRST_OF_GROUP,
    LARGE_CHANGE,
    NEW_BEST,
    NEW_FAILURE,
    Triage,
)
from evoforge.stages.analyze import Analyze
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.stats import RunStats
from evoforge.stages.reports.run_report import analyses_section
from evoforge.stages.reports.status import status_dict
from evoforge.stages.rounds.plan_data import PlanData
from evoforge.stages.sample import make_sampler
from tests.scripted_llm import Scripted

TASK = load_task("circle_packing")
ANSWER = "## What changed\nx\n## What happened\ny\n## Why it likely happened\nz\n## What to try next\nw\n" \
         "## Lessons\n- Keep the layout symmetric.\n"


def _ctx(llm, cfg: RunConfig | None = None) -> tuple[RunView, Node]:
    """A pool of the seed (1.0) and a best (1.2)."""
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0)
    best = Node(id="best", run_id="r", code=TASK.initial_code + "\n", status=EVALUATED, score_full=1.2)
    pool = Pool()
    pool.add(seed)
    pool.add(best)
    cfg = cfg or RunConfig()
    return RunView("r", TASK, cfg, llm, pool, make_sampler(cfg.search), random.Random(0),
                        SandboxLimits(), Path(".")), seed


def _item(parent: Node, node_id: str = "cand", score: float | None = 1.1, **fields) -> Item:
    item = Item(v_i=1, parent=parent)
    item.node = Node(id=node_id, run_id="r", code=TASK.initial_code + "# x\n", parent_id=parent.id,
                     status=fields.pop("status", EVALUATED), score_full=score, evaluated_at=time.time(),
                     diff="--- a\n+++ b\n+# x\n", **fields)
    return item


async def _bound(scheduler: Scheduler) -> None:
    """Make the scheduler bind (a call just waited for its slot), its slots free again."""
    holders = [await scheduler.acquire(Ask(PROPOSE)) for _ in range(scheduler.slots)]
    waiter = asyncio.create_task(scheduler.acquire(Ask(PROPOSE)))
    for _ in range(5):
        await asyncio.sleep(0)
    for _ in range(len(holders) + 1):
        scheduler.release()
    await waiter


def _run(stage: Analyze, item: Item, ctx: RunView, bind: bool) -> Node:
    async def go() -> Node:
        scheduler = ctx.llm.scheduler
        if bind:
            await _bound(scheduler)
            assert scheduler.binds()
        else:
            assert not scheduler.binds()
        return (await stage.run(item, ctx)).node

    return asyncio.run(go())


def _seen_before(triage: Triage, ctx: RunView, parent: Node) -> None:
    """Earlier candidates on island 0 that moved the score more than 0.1 (none failed)."""
    for i in range(6):
        triage.worth(_item(parent, f"early{i}", 1.19), ctx)


def test_with_slack_every_candidate_is_analysed_by_the_llm():
    backend = Scripted(ANSWER)
    ctx, seed = _ctx(ScheduledBackend(backend, Scheduler(slots=2)))
    stage = Analyze()
    _seen_before(stage.triage_for(ctx), ctx, seed)
    node = _run(stage, _item(seed), ctx, bind=False)
    assert len(backend.prompts) == 1
    assert AnalysisData.peek(node).by == BY_LLM and AnalysisData.peek(node).worth == "slack"
    assert AnalysisData.peek(node).lessons == ["Keep the layout symmetric."]


def test_when_the_llm_binds_a_candidate_with_nothing_new_gets_the_summary():
    backend = Scripted(ANSWER)
    ctx, seed = _ctx(ScheduledBackend(backend, Scheduler(slots=2)))
    stage = Analyze()
    _seen_before(stage.triage_for(ctx), ctx, seed)
    node = _run(stage, _item(seed), ctx, bind=True)
    assert backend.prompts == []  # no LLM call
    assert AnalysisData.peek(node).by == BY_SUMMARY
    assert AnalysisData.peek(node).report.startswith("# Summary of node cand (no LLM)")
    assert "## What happened" in AnalysisData.peek(node).report and AnalysisData.peek(node).lessons == []
    assert "deterministic summary" in node.artifacts["analysis_by"]


def test_when_the_llm_binds_a_new_best_is_still_analysed_by_the_llm():
    backend = Scripted(ANSWER)
    ctx, seed = _ctx(ScheduledBackend(backend, Scheduler(slots=2)))
    stage = Analyze()
    _seen_before(stage.triage_for(ctx), ctx, seed)
    node = _run(stage, _item(seed, score=1.5), ctx, bind=True)
    assert len(backend.prompts) == 1
    assert AnalysisData.peek(node).by == BY_LLM and AnalysisData.peek(node).worth == "new best"


def test_a_telling_candidate_that_loses_its_place_gets_the_summary_and_its_ration_back():
    backend = Scripted(ANSWER)
    cfg = RunConfig.model_validate({"analyze": {"max_waiting": 0}})  # refusable calls may not wait
    scheduler = Scheduler(slots=1)
    ctx, seed = _ctx(ScheduledBackend(backend, scheduler), cfg)
    stage = Analyze()
    _seen_before(stage.triage_for(ctx), ctx, seed)
    failed = _item(seed, score=None, status=FAILED, error="evaluator raised ZeroDivisionError: x")

    async def go() -> Node:
        await _bound(scheduler)
        await scheduler.acquire(Ask(PROPOSE))  # the only slot busy: the analysis would have to wait
        return (await stage.run(failed, ctx)).node

    node = asyncio.run(go())
    assert backend.prompts == []
    assert AnalysisData.peek(node).by == BY_SUMMARY
    assert scheduler.load().refused == 1 and stage.triage_for(ctx).granted_binding == 0


def test_with_by_value_off_the_binding_llm_still_analyses_every_candidate():
    backend = Scripted(ANSWER)
    cfg = RunConfig.model_validate({"analyze": {"by_value": False}})
    ctx, seed = _ctx(ScheduledBackend(backend, Scheduler(slots=2)), cfg)
    stage = Analyze()
    node = _run(stage, _item(seed), ctx, bind=True)
    assert len(backend.prompts) == 1 and AnalysisData.peek(node).by == BY_LLM


def test_candidates_are_ranked_by_what_they_can_teach():
    ctx, seed = _ctx(Scripted(ANSWER))
    triage = Triage()
    first = triage.worth(_item(seed, "first", 1.05), ctx)
    assert first.kind == LARGE_CHANGE  # too few changes seen yet: every change counts as large
    _seen_before(triage, ctx, seed)
    best = triage.worth(_item(seed, "best", 1.5), ctx)
    big = triage.worth(_item(seed, "big", 0.2), ctx)
    failure = triage.worth(_item(seed, "fail", None, status=FAILED, error="timed out after 10 s"), ctx)
    same_failure = triage.worth(_item(seed, "fail2", None, status=FAILED, error="timed out after 12 s"), ctx)
    island = triage.worth(_item(seed, "isl", 1.1, island=3), ctx)
    branch = triage.worth(_item(seed, "br", 1.1, owned={"plan": PlanData(branch="b7")}), ctx)
    dull = triage.worth(_item(seed, "dull", 1.1), ctx)
    assert (best.kind, big.kind, failure.kind) == (NEW_BEST, LARGE_CHANGE, NEW_FAILURE)
    assert same_failure.kind is None and dull.kind is None
    assert island.kind == FIRST_OF_GROUP and branch.kind == FIRST_OF_GROUP
    ranked = sorted([dull, island, failure, big, best], key=lambda w: w.rank)
    assert ranked == [best, big, failure, island, dull]
    assert sorted([triage.worth(_item(seed, "huge", 5.0), ctx), big], key=lambda w: w.rank)[1] == big


def test_a_candidate_beaten_by_a_new_best_still_in_flight_is_no_new_best():
    ctx, seed = _ctx(Scripted(ANSWER))  # the pool's best: 1.2
    triage = Triage()
    assert triage.worth(_item(seed, "a", 1.5), ctx).kind == NEW_BEST
    assert triage.worth(_item(seed, "b", 1.4), ctx).kind != NEW_BEST  # 1.5 reaches the pool first
    assert triage.worth(_item(seed, "c", 1.6), ctx).kind == NEW_BEST


def test_the_ration_lets_a_share_of_binding_candidates_through_and_new_bests_always():
    ctx, seed = _ctx(Scripted(ANSWER))
    triage = Triage(ration=0.25)
    failure = triage.worth(_item(seed, "f", None, status=FAILED, error="timed out"), ctx)
    best = triage.worth(_item(seed, "b", 1.5), ctx)
    admitted = [triage.admit(failure) for _ in range(8)]
    assert admitted.count(True) == 2  # a quarter of the eight
    assert all(triage.admit(best) for _ in range(5))
    cfg = RunConfig.model_validate({"analyze": {"bound_share": 0.3}})
    assert Analyze().triage_for(_ctx(Scripted(ANSWER), cfg)[0]).ration == 0.3


def test_the_offline_analyzer_s_report_is_counted_as_offline_not_as_the_llm_s():
    ctx, seed = _ctx(ScheduledBackend(OfflineBackend(seed=1), Scheduler(slots=2)))
    node = _run(Analyze(), _item(seed), ctx, bind=False)
    assert AnalysisData.peek(node).by == BY_OFFLINE and AnalysisData.peek(node).report.startswith("# Offline")
    stats = RunStats.rebuild([node])
    assert (stats.analysed_llm, stats.analysed_offline) == (0, 1)


def test_status_and_report_count_analyses_by_the_llm_and_by_the_summary():
    nodes = []
    for i, by in enumerate([BY_LLM, BY_LLM, BY_SUMMARY, "", BY_OFFLINE]):
        node = Node(id=f"n{i}", run_id="r", code="", status=EVALUATED, score_full=1.0, evaluated_at=1.0)
        if by:
            AnalysisData.of(node).by = by
        nodes.append(node)
    stats = RunStats.rebuild(nodes)
    assert (stats.analysed_llm, stats.analysed_offline, stats.analysed_summary) == (2, 1, 1)
    pool = Pool()
    status = status_dict(stats, pool, 60.0, {})
    assert (status["analysed_llm"], status["analysed_offline"], status["analysed_summary"]) == (2, 1, 1)
    text = "\n".join(analyses_section(nodes))
    assert "analysed_llm: 2" in text and "analysed_offline: 1" in text and "analysed_summary: 1" in text
    assert analyses_section(nodes[3:4]) == []
