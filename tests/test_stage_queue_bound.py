"""Bounded stage queues: a stage whose next stage is slow waits instead of piling items up, and
every item issued still finishes (no deadlock), on the engine over fake stages."""

from __future__ import annotations

import asyncio

from evoforge.flows.stage_pool import StagePool, link_downstream
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult, WorkerBounds
from evoforge.stages.population.item import Item
from tests.engine_fakes import FakeEngineer, FakeResearch, Log, make_harness


class SlowAnalysis(Stage):
    """One worker, after the engineer, slower than the engineers feed it; notes its queue."""

    name, after = "analyze", "engineer"

    def __init__(self, delay: float, seen: list[tuple[int, int]], holder: dict):
        self.delay, self.seen, self.holder = delay, seen, holder

    def workers(self, cfg) -> WorkerBounds:  # type: ignore[no-untyped-def]
        return WorkerBounds(1, 1, 1)

    async def run(self, item: Item, ctx) -> StageResult:  # type: ignore[no-untyped-def]
        pool = self.holder["h"].engine.pools[self.name]
        self.seen.append((pool.waiting, pool.blocked))
        await asyncio.sleep(self.delay)
        assert item.node is not None
        node = item.node.copy()
        AnalysisData.of(node).report = f"analysed {item.node.id}"
        return StageResult(node)


def _run_slow_downstream(tmp_path, config: dict | None = None):
    log, seen, holder = Log(), [], {}
    stages = [FakeResearch(log, 0.0, workers=4), FakeEngineer(log, 0.0, workers=3),
              SlowAnalysis(0.02, seen, holder)]
    h = make_harness(tmp_path, stages, max_evals=24, config=config)
    holder["h"] = h
    asyncio.run(h.run(limit_s=30))
    return h, seen


def test_a_slow_downstream_stage_never_sees_its_queue_past_the_default_bound(tmp_path):
    h, seen = _run_slow_downstream(tmp_path)
    analyze = h.engine.pools["analyze"]
    assert analyze.capacity == 2  # twice its one worker
    assert analyze.peak == 2  # the queue filled up to the bound, and never past it
    assert max(waiting for waiting, _ in seen) <= 2
    assert max(blocked for _, blocked in seen) >= 1  # engineers waited for room: back-pressure acted
    nodes = [n for n in h.nodes() if n.origin != "seed"]
    assert len(nodes) == 23 and all(n.status == EVALUATED and AnalysisData.peek(n).report for n in nodes)
    assert not h.engine.in_flight and analyze.blocked == 0
    h.close()


def test_the_bound_follows_engine_stage_queue(tmp_path):
    h, seen = _run_slow_downstream(tmp_path, {"engine": {"stage_queue": 1}})
    analyze = h.engine.pools["analyze"]
    assert analyze.capacity == 1 and analyze.peak == 1
    assert len([n for n in h.nodes() if n.origin != "seed"]) == 23 and not h.engine.in_flight
    h.close()


class Named(Stage):
    """A stage that only has a name (the pools' wiring is under test, not its runs)."""

    def __init__(self, name: str):
        self.name = name

    async def run(self, item: Item, ctx) -> StageResult:  # type: ignore[no-untyped-def]
        raise AssertionError("not run")


def _pool(name: str) -> StagePool:
    return StagePool(Named(name), WorkerBounds(1, 1, 1))


def test_hand_offs_wait_only_along_routes_that_reach_the_head():
    pools = {n: _pool(n) for n in ("research", "engineer", "debug", "analyze", "a", "b")}
    routes = {"research": "engineer", "engineer": "analyze", "analyze": COMMIT, "debug": "engineer",
              "a": "b", "b": "a"}  # a loop of default routes: waiting there could deadlock
    link_downstream(pools, routes, None)
    assert pools["research"].downstream is pools["engineer"]
    assert pools["debug"].downstream is pools["engineer"]
    assert pools["engineer"].downstream is pools["analyze"]
    assert pools["analyze"].downstream is None
    assert pools["a"].downstream is None and pools["b"].downstream is None


def test_a_hand_off_off_the_default_route_never_waits():
    async def scenario() -> tuple[bool, bool]:
        pools = {"engineer": _pool("engineer"), "analyze": _pool("analyze")}
        link_downstream(pools, {"engineer": "analyze", "analyze": COMMIT}, 1)
        pools["analyze"].push(Item(v_i=0, parent=Node(id="p", run_id="r", code="")))
        off_route = asyncio.ensure_future(pools["engineer"].hand_on("debug"))
        on_route = asyncio.ensure_future(pools["engineer"].hand_on("analyze"))
        await asyncio.sleep(0.01)
        waited = not on_route.done() and pools["analyze"].blocked == 1
        pools["analyze"].take()  # room again: the waiting hand-off goes on
        await asyncio.wait_for(on_route, 1)
        return off_route.done() and waited, pools["analyze"].blocked == 0

    assert asyncio.run(scenario()) == (True, True)
