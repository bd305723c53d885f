"""No evaluation twice: a repeated program is served the recorded result (or waits for the one in
flight) and costs no evaluation; other levels or knob values are evaluated; status counts the
repeats; a resumed run knows what it evaluated before."""

from __future__ import annotations

import asyncio
import json

from evoforge.flows.commands import status_text
from evoforge.flows.session import open_session
from evoforge.flows.snapshot import build_snapshot
from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, PRUNED, REJECTED, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.algorithms import asi_evolve
from evoforge.stages.engineer import Engineer, engineer
from evoforge.stages.evaluation.job import EvalReport, EvalRequest, InlineEvaluations, Release
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.population.repeats import EvalKey, RepeatMemo, duplicate_evaluations
from evoforge.stages.sinks.mlflow_runs import candidate_run
from tests.engine_fakes import TASK, make_harness
from tests.guard_tasks import candidate_item, make_ctx, make_task, with_block

GOOD = "def solve():\n    return 3.0\n\n\ndef helper():\n    return 1.0\n"
SAME_AS_GOOD = "def solve():\n    return 3.0   # three\n\n\n\ndef helper():\n    return 1.0\n"
CRASHES = "def solve():\n    return 1 / 0\n\n\ndef helper():\n    return 1.0\n"


class CountingEvaluations(InlineEvaluations):
    """The real inline sandbox runner, counting its jobs; with `gate`, each job waits for it first."""

    def __init__(self, gate: asyncio.Event | None = None):
        self.requests: list[EvalRequest] = []
        self.gate, self.started = gate, asyncio.Event()

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        self.requests.append(request)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        return await super().run(request, release)


def _item(task, block: str, node_id: str) -> Item:
    item = candidate_item(task, with_block(task, block))
    item.node.id = node_id
    return item


def test_two_identical_proposals_in_flight_at_once_are_evaluated_once(tmp_path):
    task = make_task(tmp_path / "t")
    runner = CountingEvaluations(asyncio.Event())
    ctx = make_ctx(task, tmp_path, evaluations=runner)
    first, second = _item(task, GOOD, "first"), _item(task, SAME_AS_GOOD, "second")
    key = EvalKey.of(first.node.code, task.search_level, {})

    async def both() -> tuple[StageResult, StageResult]:
        one = asyncio.ensure_future(engineer(first, ctx))
        two = asyncio.ensure_future(engineer(second, ctx))
        await runner.started.wait()  # the first evaluation has started and is held at the gate
        await asyncio.sleep(0)  # the second has reached the memo and waits there
        assert ctx.repeats.in_flight(key) and not two.done()
        runner.gate.set()
        return await one, await two

    evaluated, repeat = asyncio.run(both())
    assert [r.node_id for r in runner.requests] == ["first"]  # one evaluation, not two
    assert evaluated.node.status == EVALUATED and evaluated.node.score_full == 4.0
    node = repeat.node
    assert node.status == REJECTED and RepeatData.peek(node).repeat_of == "first" and not node.was_evaluated
    assert node.eval_s == 0.0 and node.score_full is None  # nothing ranks or counts it twice
    assert "repeat of node first (evaluated, full score 4)" in node.error
    assert json.loads(node.artifacts["repeated_result"])["score"] == 4.0


def test_a_program_that_failed_earlier_is_served_its_failure_not_evaluated_again(tmp_path):
    task = make_task(tmp_path / "t")
    runner = CountingEvaluations()
    ctx = make_ctx(task, tmp_path, evaluations=runner)
    failed = asyncio.run(engineer(_item(task, CRASHES, "crashed"), ctx)).node
    assert failed.status == FAILED and "ZeroDivisionError" in failed.error
    again = _item(task, CRASHES.replace("1 / 0", "1/0  # still"), "again")
    node = asyncio.run(engineer(again, ctx)).node
    assert len(runner.requests) == 1
    assert node.status == REJECTED and RepeatData.peek(node).repeat_of == "crashed" and not node.was_evaluated
    assert "repeat of node crashed (failed: " in node.error and "ZeroDivisionError" in node.error


def test_another_stage_or_other_knob_values_are_other_evaluations():
    memo = RepeatMemo()
    code = "x = knob('x', 1.0)\n"
    done = Node(id="a", run_id="r", code=code, status=EVALUATED, score_pilot=1.0, evaluated_at=1.0)
    memo.finish(EvalKey.of(code, "pilot", {"x": 1.0}), done, "pilot")
    claimed = asyncio.run(memo.claim(EvalKey.of(code, "pilot", {"x": 1.0})))
    assert claimed is not None and claimed.node_id == "a" and claimed.score == 1.0
    assert asyncio.run(memo.claim(EvalKey.of(code, "full", {"x": 1.0}))) is None  # another stage
    assert asyncio.run(memo.claim(EvalKey.of(code, "pilot", {"x": 2.0}))) is None  # other params
    assert len(memo) == 1


def test_a_pruned_evaluation_is_not_a_result_so_its_repeat_is_evaluated():
    memo = RepeatMemo()
    key = EvalKey.of("y = 2\n", "full", {})
    assert asyncio.run(memo.claim(key)) is None
    pruned = Node(id="p", run_id="r", code="y = 2\n", status=PRUNED, score_partial=0.1, evaluated_at=1.0)
    memo.finish(key, pruned, "full")
    assert memo.recorded(key) is None and not memo.in_flight(key)
    assert asyncio.run(memo.claim(key)) is None  # the next claimant evaluates it


def test_a_waiting_repeat_takes_over_when_the_evaluation_in_flight_is_not_complete():
    memo = RepeatMemo()
    key = EvalKey.of("z = 3\n", "full", {})

    async def scenario():
        assert await memo.claim(key) is None  # the first claimant evaluates
        waiter = asyncio.ensure_future(memo.claim(key))
        await asyncio.sleep(0)
        assert not waiter.done()
        memo.finish(key, Node(id="p", run_id="r", code="z = 3\n", status=PRUNED, evaluated_at=1.0), "full")
        return await waiter

    assert asyncio.run(scenario()) is None  # no result to serve: the waiter evaluates it now


class SameProgram(Stage):
    """A research stand-in proposing the same program (up to comments) every time."""

    name, then, checkpoint = "research", "engineer", True

    def __init__(self) -> None:
        self.n = 0

    async def run(self, item: Item, ctx) -> StageResult:
        self.n += 1
        node = new_candidate(item, ctx)
        start = "# EVOLVE-BLOCK-START\n"
        node.code = TASK.initial_code.replace(start, f"{start}# try {self.n}\nVARIANT = 1\n")
        node.status, node.tokens_in = PROPOSED, 10
        return StageResult(node)


def test_a_run_of_repeats_evaluates_each_program_once_and_status_counts_the_repeats(tmp_path):
    runner = CountingEvaluations()
    h = make_harness(tmp_path, [SameProgram(), Engineer()], max_evals=4,
                     config={"budget": {"max_evals": 4, "max_proposals": 6}}, view={"evaluations": runner})
    asyncio.run(h.run(limit_s=120))
    nodes = h.nodes()
    proposals = [n for n in nodes if n.origin != "seed"]
    assert len(proposals) == 6 and len(runner.requests) == 1  # the seed was evaluated before
    evaluated = [n for n in proposals if n.status == EVALUATED]
    repeats = [n for n in proposals if RepeatData.peek(n).repeat_of is not None]
    assert len(evaluated) == 1 and len(repeats) == 5
    assert {RepeatData.peek(n).repeat_of for n in repeats} == {evaluated[0].id}
    assert duplicate_evaluations(nodes) == 0
    status = build_snapshot(h.state, h.hub, "t", {}, {}, {})["status"]
    h.close()
    assert status["repeats"] == 5 and status["duplicates_rejected"] == 5
    assert status["evaluations"] == 2 and status["proposals"] == 6  # seed + one: repeats are free
    text = status_text({**status, "task": "t", "max_evals": 4})
    assert "repeats       5  (of the duplicates: served from earlier evaluations, not evaluated)" in text
    run = candidate_run(repeats[0], "full")
    assert run.tags["repeat_of"] == evaluated[0].id and run.tags["status"] == "rejected"
    assert run.status == "FAILED" and "score_full" not in run.metrics and run.metrics["eval_s"] == 0.0


def test_duplicate_evaluations_counts_programs_evaluated_twice():
    def node(i: int, code: str, evaluated: bool) -> Node:
        return Node(id=f"n{i}", run_id="r", code=code, evaluated_at=1.0 if evaluated else None)

    nodes = [node(0, "a = 1\n", True), node(1, "a = 1  # same\n", True), node(2, "a = 1\n", False),
             node(3, "b = 2\n", True), node(4, "a=1\n", True)]
    assert duplicate_evaluations(nodes) == 2


def test_a_resumed_run_knows_the_programs_evaluated_before(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    good, crash = (TASK.initial_code.replace("# EVOLVE-BLOCK-START\n", f"# EVOLVE-BLOCK-START\n{line}\n")
                   for line in ("VARIANT = 1", "raise SystemExit(3)"))
    with NodeStore(RunPaths(run_dir).db) as store:
        store.write([
            Node(id="seed", run_id="r", code=TASK.initial_code, origin="seed", status=EVALUATED,
                 score_full=1.0, evaluated_at=1.0),
            Node(id="good", run_id="r", code=good, status=EVALUATED, score_full=2.0, evaluated_at=2.0),
            Node(id="crash", run_id="r", code=crash, status=FAILED, failed_stage="engineer",
                 error="exited with code 3", evaluated_at=3.0),
            Node(id="waiting", run_id="r", code=good + "\nx = 1\n", status=PROPOSED),
        ], {"run_id": "r", "task": TASK.name})
    cfg = RunConfig.model_validate({"tracking": {"mlflow": False}, "cognition": {"enabled": False}})
    session = open_session(TASK, cfg, run_dir, OfflineBackend(), tmp_path / "ws", asi_evolve.pipeline())
    try:
        memo, level = session.ctx.repeats, TASK.search_level
        assert memo.recorded(EvalKey.of(good + "\n# again\n", level, {})).node_id == "good"
        failure = memo.recorded(EvalKey.of(crash, level, {}))
        assert failure.node_id == "crash" and failure.error == "exited with code 3"
        assert memo.recorded(EvalKey.of(good + "\nx = 1\n", level, {})) is None  # never evaluated
        assert len(memo) == 3
    finally:
        session.hub.close()


def test_a_seed_evaluated_again_on_a_rerun_replaces_its_recorded_failure():
    failed = Node(id="seed", run_id="r", code=TASK.initial_code, origin="seed", status=FAILED,
                  error="exited with code 1", evaluated_at=1.0)
    memo = RepeatMemo.rebuild([failed], TASK)
    key = EvalKey.of(TASK.initial_code, TASK.search_level, {})
    assert memo.recorded(key).status == "failed"
    memo.finish(key, failed.copy(status=EVALUATED, error=None, score_full=1.5, evaluated_at=2.0), "full")
    assert memo.recorded(key).score == 1.5


def test_a_transient_failure_is_not_served_again_and_the_repeat_is_evaluated():
    memo = RepeatMemo()
    timed_out = Node(id="slow", run_id="r", code="z = 4\n", status=FAILED, failed_stage="engineer",
                     error="timed out after 10.0 s", evaluated_at=1.0)
    key = EvalKey.of("z = 4\n", "full", {})

    async def scenario():
        assert await memo.claim(key) is None
        memo.finish(key, timed_out, "full")  # a loaded machine's time limit: not the program's fault
        return await memo.claim(key)  # a repeat: the caller evaluates it again

    assert asyncio.run(scenario()) is None and memo.recorded(key) is None
    crashed = Node(id="bad", run_id="r", code="z = 5\n", status=FAILED, error="evaluator raised "
                   "ZeroDivisionError: division by zero", evaluated_at=2.0)
    rebuilt = RepeatMemo.rebuild([timed_out, crashed], TASK)  # a resume: the same rule
    assert rebuilt.recorded(key) is None
    assert rebuilt.recorded(EvalKey.of("z = 5\n", TASK.search_level, {})).node_id == "bad"
