"""The engine-side wiring of the ML roles: shared evaluation slots, rounds and their jobs, a
round job's decision reaching the single writer, branch shares, and the mutation agent's contract
in the research prompt."""

from __future__ import annotations

import asyncio
import random

import pytest

from evoforge.evaluators.evaluation import EvalOutcome
from evoforge.evaluators.task import load_task
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.evaluation.job import EvalReport, EvaluationRunner
from evoforge.stages.evaluation.slots import SlottedEvaluations
from evoforge.stages.population.pool import Pool
from evoforge.stages.research_prompt import research_messages
from evoforge.stages.rounds.branch_shares import BranchShares, branch_parent
from evoforge.stages.rounds.branches import KillCriteria, initial_plan
from evoforge.stages.rounds.plan_data import PlanData
from evoforge.stages.rounds.schedule import RoundJob, run_rounds
from evoforge.stages.tuning.param_study import TuningData
from tests.engine_fakes import FakeEngineer, FakeResearch, Log, make_harness

KILL = KillCriteria(stall_rounds=3, max_invalid_rate=0.5, min_candidates=2)


class _Slow(EvaluationRunner):
    def __init__(self) -> None:
        self.running = self.most = 0

    async def run(self, request, release):
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0.02)
        self.running -= 1
        return EvalReport(outcome=EvalOutcome(ok=True, score=1.0, metrics={}, artifacts={}, error=None,
                                              seconds=0.02, cascade_step=None))


def test_evaluation_slots_cap_every_evaluation_of_the_run():
    inner = _Slow()
    slots = SlottedEvaluations(inner, 2)

    async def many() -> None:
        await asyncio.gather(*(slots.run(None, None) for _ in range(9)))  # type: ignore[arg-type]

    asyncio.run(many())
    assert inner.most == 2 and slots.most_running == 2 and slots.running == 0
    with pytest.raises(ValueError):
        SlottedEvaluations(inner, 0)


def test_round_jobs_run_every_k_rounds_between_the_results(tmp_path):
    log = Log()
    harness = make_harness(tmp_path, [FakeResearch(log), FakeEngineer(log, delay=0.02)], max_evals=13)
    engine, stats, ran = harness.engine, harness.state.stats, []

    async def job(round_no: int) -> None:
        ran.append((round_no, stats.proposals))

    async def go() -> None:
        await engine.run(background=[lambda: run_rounds(engine, stats, [RoundJob("every-2", 2, job)], 3)])

    asyncio.run(go())
    harness.close()
    rounds = [r for r, _ in ran]
    assert rounds and all(r % 2 == 0 for r in rounds)  # rounds of 3 proposals, the job every 2nd
    assert all(p >= 3 * r for r, p in ran) and rounds == sorted(set(rounds))  # each round once


def test_a_failing_round_job_stops_the_run_through_the_fatal_path(tmp_path):
    log = Log()
    harness = make_harness(tmp_path, [FakeResearch(log), FakeEngineer(log)], max_evals=40)
    engine = harness.engine

    async def job(round_no: int) -> None:
        raise ZeroDivisionError("a round job's bug")

    async def go() -> None:
        await engine.run(background=[lambda: run_rounds(engine, harness.state.stats,
                                                        [RoundJob("broken", 1, job)], 2)])

    from evoforge.flows.engine import EngineFailure

    with pytest.raises(EngineFailure, match="ZeroDivisionError"):
        asyncio.run(go())
    harness.close()
    assert harness.state.stats.proposals < 40  # it stopped early


def _node(i: int, branch: str, score: float) -> Node:
    return Node(id=f"n{i}", run_id="r", code=f"x = {i}\n", status=EVALUATED, score_pilot=score,
                owned={"plan": PlanData(branch=branch)})


def test_each_branch_gets_its_share_and_its_own_parents():
    plan = initial_plan("", 3, KILL, [])
    shares = BranchShares()
    picked = []
    for _ in range(9):
        branch = shares.pick(plan)
        shares.note(branch.id)
        picked.append(branch.id)
    assert sorted(picked) == ["B1"] * 3 + ["B2"] * 3 + ["B3"] * 3
    pool = Pool(level="pilot")
    for i, (branch, score) in enumerate([("B1", 0.5), ("B1", 0.9), ("B2", 0.7)]):
        pool.add(_node(i, branch, score))
    rng = random.Random(0)
    assert branch_parent(plan.slots[0], pool, rng, exploitation=1.0).id == "n1"  # B1's best
    assert branch_parent(plan.slots[2], pool, rng, exploitation=1.0) is None  # B3 has none yet
    assert BranchShares.rebuild(pool.nodes).issued == {"B1": 2, "B2": 1}


def test_the_research_prompt_carries_the_branch_the_contract_and_the_tuned_values():
    task = load_task("digits")
    plan = initial_plan("", 2, KILL, ["An RBF SVM is the strongest single model"])
    parent = Node(id="p", run_id="r", code=task.initial_code, status=EVALUATED, score_pilot=0.92,
                  params={"C": 3.5, "max_iter": 400},
                  owned={"param_search": TuningData(trials_run=12),
                         "engineer": EngineerData(score_default=0.9)})
    prompt = research_messages(task, parent, [], "diff", branch=plan.slots[0], knobs=True)[-1]["content"]
    assert "## Research branch B1 (slot 1)\nHypothesis: An RBF SVM is the strongest single model" in prompt
    assert "## Mutation agent contract" in prompt and 'knob("C", 1.0' in prompt
    assert "C=3.5, max_iter=400" in prompt and "scored 0.9" in prompt
    assert "score 0.92 at the pilot level" in prompt
    plain = research_messages(task, parent, [], "diff")[-1]["content"]
    assert "Mutation agent contract" not in plain and "Research branch" not in plain
