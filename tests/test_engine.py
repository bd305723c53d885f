"""The stage engine on fake stages (no Prefect, no LLM, no sandbox): routing and ordering,
plug-in stages, backpressure, stop latency, crashes down one fatal path, taint, the barrier."""

from __future__ import annotations

import asyncio
import time

import pytest

from evoforge.flows.adaptive import AdaptiveController
from evoforge.flows.engine import EngineFailure
from evoforge.flows.policies import AsyncPolicy, BarrierPolicy
from evoforge.infra.config import AdaptiveConfig
from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.pipeline.stage import COMMIT
from evoforge.stages.population.item import Item
from evoforge.stages.population.speculation import descends_from, taint_derived
from evoforge.stages.sinks.base import Event, EventKind
from tests.engine_fakes import FakeEngineer, FakeResearch, Log, NoteAnalysis, make_harness, pipeline_of


def _run(coro):
    return asyncio.run(coro)


def test_items_flow_research_then_engineer_then_commit_and_the_budget_holds(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log, 0.01), FakeEngineer(log, 0.01)], max_evals=12)
    _run(h.run())
    nodes = [n for n in h.nodes() if n.origin != "seed"]
    assert len(nodes) == 11 and all(n.status == EVALUATED for n in nodes)  # seed + 11 = 12
    for node in nodes:  # each candidate: research ended before its evaluation started
        researched = log.events.index(("end", "research", node.id))
        assert researched < log.events.index(("start", "engineer", node.id))
    assert h.state.stats.evaluations == 12 and not h.engine.in_flight


def test_a_stage_plugs_in_after_another_without_an_engine_edit(tmp_path):
    log = Log()
    stages = [FakeResearch(log, 0.0), FakeEngineer(log, 0.0), NoteAnalysis(log)]
    routes = pipeline_of(stages).routes({s.name for s in stages})
    assert routes == {"research": "engineer", "engineer": "analyze", "analyze": COMMIT}
    h = make_harness(tmp_path, stages, max_evals=8)
    _run(h.run())
    nodes = [n for n in h.nodes() if n.origin != "seed"]
    assert len(nodes) == 7
    assert all(AnalysisData.peek(n).report == f"analysed {n.id} (evaluated)" for n in nodes)
    assert [e for e in log.events if e[1] == "analyze"] and h.engine.pools["analyze"].finished == 7


def test_no_item_is_issued_while_the_evaluation_queue_is_full(tmp_path):
    log = Log()
    seen: list[int] = []
    holder: dict = {}
    research = FakeResearch(log, 0.005, workers=4,
                            observe=lambda: seen.append(holder["h"].engine.pools["engineer"].waiting))
    h = make_harness(tmp_path, [research, FakeEngineer(log, 0.03, workers=1)], max_evals=20,
                     config={"engine": {"queue_size": 2}})
    holder["h"] = h
    _run(h.run())
    assert len(seen) == 19 and max(seen) < 2  # every research call began with room in the queue


def test_stop_returns_within_a_second_while_a_stage_call_hangs(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log, None), FakeEngineer(log)], max_evals=10)

    async def scenario() -> float:
        task = asyncio.ensure_future(h.engine.run())
        await asyncio.sleep(0.3)
        assert [e for e in log.events if e[0] == "start"]  # the calls are hanging
        stopped = time.monotonic()
        h.stop.set()
        await asyncio.wait_for(task, 5)
        return time.monotonic() - stopped

    assert _run(scenario()) < 1.0


def test_an_error_inside_one_stage_run_fails_only_that_node(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log), FakeEngineer(log, fail_every=3)], max_evals=10)
    _run(h.run())
    failed = [n for n in h.nodes() if n.status == FAILED]
    assert failed and all(n.failed_stage == "engineer" and "boom on item" in n.error for n in failed)
    assert h.state.stats.failed_internal == len(failed)
    assert h.state.stats.duplicates == 0  # an internal error is not a duplicate


def test_a_sampler_error_is_fatal_not_silent(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log), FakeEngineer(log)], max_evals=10)

    def broken(pool, rng):
        raise ZeroDivisionError("sampler bug")

    h.engine.ctx.sampler.select_parent = broken
    with pytest.raises(EngineFailure, match="sampler bug"):
        _run(h.run(limit_s=5))


def test_a_node_database_that_cannot_be_written_stops_the_run_and_keeps_its_rows(tmp_path):
    class FullDisk(NodeStore):
        def write(self, nodes, meta):
            if any(n.origin != "seed" for n in nodes):
                raise OSError(5, "Input/output error")  # (a full disk stops at once: test_disk_faults)
            super().write(nodes, meta)

    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log, 0.02), FakeEngineer(log, 0.02)], max_evals=2000,
                     store=FullDisk(tmp_path / "nodes.duckdb"))
    started = time.monotonic()
    with pytest.raises(EngineFailure, match="Input/output error"):  # after 3 failed batches in a row
        _run(h.run(limit_s=10))
    assert time.monotonic() - started < 5
    database = h.hub.sinks[0]
    assert database.pending() > 0  # the rows are still held, not dropped
    assert h.hub.failures()["nodes"]["failures"] >= 3


def test_a_background_task_error_is_fatal(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log, 0.05), FakeEngineer(log, 0.05)], max_evals=200)

    async def ticker():
        await asyncio.sleep(0.1)
        raise TypeError("snapshot bug")

    with pytest.raises(EngineFailure, match="snapshot bug"):
        _run(h.run(limit_s=5, background=[ticker]))


def test_the_barrier_policy_runs_generations_one_after_another(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log, 0.01, workers=4), FakeEngineer(log, 0.01, workers=2)],
                     max_evals=9, policy=BarrierPolicy())
    _run(h.run())
    starts = [(e[1], e[2]) for e in log.events if e[0] == "start"]
    # generations of 4, 4 and 0 (seed + 8 = 9): all research of a generation before any of its evaluations,
    # and all evaluations of a generation before the next generation's research
    kinds = "".join("R" if s == "research" else "E" for s, _ in starts)
    assert kinds == "RRRREEEERRRREEEE"
    assert h.engine.policy.generation == 2


def test_async_policy_issues_without_a_barrier(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log, 0.01, workers=4), FakeEngineer(log, 0.02, workers=2)],
                     max_evals=13, policy=AsyncPolicy(queue_size=2))
    _run(h.run())
    kinds = "".join("R" if e[1] == "research" else "E" for e in log.events if e[0] == "start")
    assert "ER" in kinds  # research starts while evaluations are going


def test_adaptive_control_adds_a_worker_to_the_slow_stage(tmp_path):
    log = Log()
    controller = AdaptiveController(AdaptiveConfig(enabled=True, tau_s=0.1, max_workers={"research": 4}))
    workers_after: list[tuple[str, int]] = []  # each research decision and the pool's workers after it
    decide = controller.step

    def step(engine):
        taken = decide(engine)
        for decision in taken:
            if decision.split(" ", 2)[1] == "research":
                log.add("decision", "research", decision)  # where it fell among the stage runs
                workers_after.append((decision, engine.pools["research"].workers))
        return taken

    controller.step = step
    h = make_harness(tmp_path, [FakeResearch(log, 0.1, workers=1, high=4), FakeEngineer(log, 0.0)],
                     max_evals=25, controller=controller)
    _run(h.run())
    added = [d for d, _ in workers_after if d.startswith("+1 research")]
    assert added, controller.decisions
    for decision, workers in workers_after:  # "+1 research (1->2): ...": the pool has the 2 workers
        assert workers == int(decision.split("->", 1)[1].split(")", 1)[0]), (decision, workers)
    # the extra workers ran: research calls overlapped after the first +1, never before it
    first = log.events.index(("decision", "research", added[0]))
    running, overlap_before, overlap_after = 0, 0, 0
    for i, (event, stage, _) in enumerate(log.events):
        if stage != "research" or event == "decision":
            continue
        running += 1 if event == "start" else -1
        if i < first:
            overlap_before = max(overlap_before, running)
        else:
            overlap_after = max(overlap_after, running)
    assert overlap_before == 1 and overlap_after >= 2, (overlap_before, overlap_after)


def test_rollback_taint_reaches_descendants_at_any_depth():
    spec = Node(id="spec", run_id="r", code="s")
    child = Node(id="child", run_id="r", code="c", parent_id="spec")
    other = Node(id="other", run_id="r", code="o", parent_id="root")
    lineage = {"root": None, "spec": "root", "child": "spec", "grandchild": "child", "other": "root"}
    grand = Item(v_i=1, parent=child)  # a grandchild of the rolled-back node, in flight
    direct = Item(v_i=1, parent=spec)
    unrelated = Item(v_i=1, parent=other)
    marked = taint_derived([grand, direct, unrelated], "spec", lineage)
    assert marked == [grand, direct] and unrelated.tainted_by is None and grand.tainted_by == "spec"
    assert descends_from("grandchild", "spec", lineage) and not descends_from("other", "spec", lineage)


def test_the_node_database_writes_in_batches_and_keeps_rows_when_a_write_fails(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log, 0.0, workers=4), FakeEngineer(log, 0.0, workers=4)],
                     max_evals=40)
    _run(h.run())
    database = h.hub.sinks[0]
    assert h.hub.sync(10) and database.rows_written >= 39
    assert database.transactions < 10  # batched: 79 events (proposals and results), few transactions
    assert len(h.nodes()) == 40  # and nothing lost: the seed and 39 candidates

    node = Node(id="late", run_id="r", code="x", status=PROPOSED)

    def refuse(nodes, meta):
        raise OSError("disk gone")

    database.store.write = refuse
    with pytest.raises(OSError):
        database.record([Event(EventKind.PROPOSED, node)])
    assert database.pending() == 1


def test_a_stage_that_skips_an_item_is_passed_over_without_a_run(tmp_path):
    class EveryOther(NoteAnalysis):
        def skips(self, item, ctx):
            return int(item.node.id, 16) % 2 == 0  # node ids are random hex

    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log), FakeEngineer(log), EveryOther(log)], max_evals=12)
    _run(h.run())
    nodes = [n for n in h.nodes() if n.origin != "seed"]
    wanted = [n for n in nodes if int(n.id, 16) % 2 == 1]
    assert len(nodes) == 11 and h.engine.pools["analyze"].finished == len(wanted)
    assert all(bool(AnalysisData.peek(n).report) == (n in wanted) for n in nodes)
