"""The plan agent: branch health from nodes, kill criteria enforced in code, the LLM's keep /
refresh / retire per slot (never a merge), the offline and failed-LLM fallbacks, and the plan's
markdown, which says who wrote it."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import pytest

from evoforge.infra.llm_sim.answers import PREFACE as SIM_PREFACE
from evoforge.infra.llm_sim.answers import build_answer
from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.offline.plan_answer import offline_plan_answer
from evoforge.infra.prompt_format import is_analysis_prompt, is_plan_prompt, parse_plan_slots
from evoforge.stages.rounds.branches import KillCriteria, branch_health, initial_plan, plan_md
from evoforge.stages.rounds.plan_agent import (
    OFFLINE_AUTHOR,
    SIMULATED_AUTHOR,
    build_leaderboard,
    parse_plan_answer,
    plan_messages,
    replan,
)
from evoforge.stages.rounds.plan_data import PlanData
from evoforge.stages.tuning.param_study import TuningData
from tests.scripted_llm import Scripted

KILL = KillCriteria(stall_rounds=3, max_invalid_rate=0.5, min_candidates=3)
ROUNDS: dict[str, int] = {}


def node(nid: str, branch: str, rnd: int, score: float | None, status=EVALUATED, saturation=None,
         **kw) -> Node:
    ROUNDS[nid] = rnd
    owned: dict = {"param_search": TuningData(saturation=saturation)} if saturation else {}
    if branch is not None:
        owned["plan"] = PlanData(branch=branch)
    return Node(nid, "run", "x = 1\n", status=status, score_pilot=score,
                created_at=float(rnd), evaluated_at=float(rnd), owned=owned, **kw)


def round_of(n: Node) -> int:
    return ROUNDS[n.id]


def plan3():
    return initial_plan("predict churn", 3, KILL, ["gradient boosting", "feature engineering"])


def nodes3() -> list[Node]:
    """B1 improving (best at round 5), B2 stalled since round 1, B3 mostly failing."""
    return [
        node("a1", "B1", 1, 0.70, saturation={"spread": 0.02, "improved": 1}),
        node("a2", "B1", 3, 0.75, saturation={"spread": 0.04, "improved": 0}),
        node("a3", "B1", 5, 0.80),
        node("b1", "B2", 1, 0.78, saturation={"spread": 0.01, "improved": 0}),
        node("b2", "B2", 3, 0.78),
        node("b3", "B2", 5, 0.60),
        node("c1", "B3", 2, None, status=FAILED),
        node("c2", "B3", 4, None, status=FAILED),
        node("c3", "B3", 5, 0.5),
        node("c4", "B3", 6, None, status=PROPOSED),  # in flight: not a candidate yet
    ]


def run(coro):
    return asyncio.run(coro)


def do_replan(plan, llm, nodes=None, fresh=("try a tabular transformer",), current=6):
    return run(replan(plan, nodes3() if nodes is None else nodes, llm=llm, round=current, round_of=round_of,
                      level="pilot", maximize=True, task_description="predict churn",
                      leaderboard_rows=build_leaderboard(nodes3(), "pilot", True), temperature=0.7,
                      max_tokens=500, fresh_hypotheses=list(fresh)))


def test_initial_plan_uses_seeds_then_generic_hypotheses():
    plan = initial_plan("", 5, KILL, ["seed one"])
    assert [b.id for b in plan.slots] == ["B1", "B2", "B3", "B4", "B5"]
    assert plan.slots[0].hypothesis == "seed one" and plan.slots[0].origin == "seed"
    assert plan.slots[1].hypothesis == "improve the model family"
    assert plan.slots[4].hypothesis.startswith("improve the model family")  # cycled, kept distinct
    assert len({b.hypothesis for b in plan.slots}) == 5
    assert (plan.version, plan.round) == (1, 0)


def test_branch_health_numbers():
    health = branch_health(plan3(), nodes3(), round_of, 6, "pilot", maximize=True)
    b1, b2, b3 = health["B1"], health["B2"], health["B3"]
    assert (b1.candidates, b1.evaluated, b1.failed, b1.best, b1.best_node_id) == (3, 3, 0, 0.80, "a3")
    assert b1.rounds_since_improvement == 1 and not b1.killed
    assert b1.trial_spread == pytest.approx(0.03) and b1.saturated_share == pytest.approx(0.5)
    assert b2.best_node_id == "b1" and b2.rounds_since_improvement == 5  # a tie is no improvement
    assert b2.killed and "no improvement for 5 rounds" in b2.kill_reason
    assert (b3.candidates, b3.failed) == (3, 2) and b3.invalid_rate == pytest.approx(2 / 3)
    assert b3.killed and "invalid rate" in b3.kill_reason
    assert b3.trial_spread is None and b3.saturated_share is None


def test_branch_health_minimize_and_min_candidates():
    nodes = [node("m1", "B1", 1, 0.5), node("m2", "B1", 2, 0.3)]
    health = branch_health(plan3(), nodes, round_of, 9, "pilot", maximize=False)
    assert health["B1"].best == 0.3 and health["B1"].rounds_since_improvement == 7
    assert not health["B1"].killed  # only 2 candidates < min_candidates
    assert health["B2"].candidates == 0 and health["B2"].rounds_since_improvement == 9


def test_kill_criteria_retire_a_branch_even_when_the_llm_says_keep():
    llm = Scripted("SLOT 1: keep\nSLOT 2: keep\nSLOT 3: keep", model="qwen")
    new, health, completion = do_replan(plan3(), llm)
    assert completion is not None and new.author == "LLM qwen"
    assert [d.action for d in new.decisions] == ["keep", "retire", "retire"]
    assert "overruled" in new.decisions[1].reason
    assert new.slots[1].id == "B4" and new.slots[1].hypothesis == "try a tabular transformer"
    assert new.slots[2].id == "B5" and new.slots[2].hypothesis == "improve preprocessing / features"
    assert [b.id for b, _ in new.retired] == ["B2", "B3"]
    assert (new.version, new.round, new.slots[1].born_round) == (2, 6, 6)


def test_killed_slot_takes_the_llms_retire_hypothesis():
    llm = Scripted("SLOT 2: retire: try CatBoost\nKILL 2: stall_rounds=2 invalid_rate=0.25")
    new, _, _ = do_replan(plan3(), llm)
    assert new.slots[1].hypothesis == "try CatBoost" and new.slots[1].origin == "llm"
    assert new.slots[1].kill == KillCriteria(2, 0.25, 3)  # tightened: taken (looser is capped)


def test_refresh_keeps_the_id_and_changes_the_hypothesis():
    llm = Scripted("SLOT 1: refresh: tune the learning-rate schedule")
    new, _, _ = do_replan(plan3(), llm, nodes=[])
    assert new.slots[0].id == "B1" and new.slots[0].hypothesis == "tune the learning-rate schedule"
    assert new.decisions[0].action == "refresh" and new.decisions[0].new_branch_id is None


def test_retire_gives_a_new_id_counting_over_the_history():
    llm = Scripted("SLOT 3: retire: try a linear baseline")
    first, _, _ = do_replan(plan3(), llm, nodes=[], current=1)
    second, _, _ = do_replan(first, Scripted("SLOT 1: retire: try kNN"), nodes=[], current=2)
    assert first.slots[2].id == "B4" and first.decisions[2].new_branch_id == "B4"
    assert second.slots[0].id == "B5" and [b.id for b, _ in second.retired] == ["B3", "B1"]


def test_merge_is_refused_and_noted():
    llm = Scripted("SLOT 1: merge with 2\nSLOT 2: retire: combine it with slot 3\n"
                   "SLOT 3: retire: feature engineering")
    new, _, _ = do_replan(plan3(), llm, nodes=[])
    assert [b.id for b in new.slots] == ["B1", "B2", "B3"]
    assert [d.action for d in new.decisions] == ["keep", "keep", "keep"]
    assert new.notes.count("refused") == 3


def test_two_slots_naming_the_same_new_hypothesis_is_refused():
    answers = parse_plan_answer("SLOT 1: retire: try SVMs\nSLOT 3: refresh: Try SVMs.", plan3())
    assert [a.action for a in answers] == ["retire", "keep", "keep"]
    assert answers[2].reason.startswith("refused")


def test_parse_is_tolerant_and_a_missing_slot_means_keep():
    text = ("Here is my plan.\n**SLOT 1:** Keep\n- slot 2 (B2) - REFRESH: bigger ensembles  \n"
            "random line\nSLOT <n>: keep | refresh: <new direction>\nkill 1: invalid_rate = 40%\n")
    answers = parse_plan_answer(text, plan3())
    assert [(a.action, a.text, a.stated) for a in answers] == [
        ("keep", "", True), ("refresh", "bigger ensembles", True), ("keep", "", False)]
    assert answers[0].kill == KillCriteria(3, 0.4, 3) and answers[1].kill is None


def test_offline_replan_runs_the_rules_and_says_offline():
    for llm in (None, OfflineBackend(seed=1)):
        new, health, completion = do_replan(plan3(), llm)
        assert completion is None and new.author == OFFLINE_AUTHOR
        assert [d.action for d in new.decisions] == ["keep", "retire", "retire"]
        assert health["B2"].killed


def test_llm_error_and_unparsable_answer_fall_back_to_the_rules():
    new, _, completion = do_replan(plan3(), Scripted(None))
    assert completion is None and "failed" in new.author and "HTTP 500" in new.notes
    assert [d.action for d in new.decisions] == ["keep", "retire", "retire"]
    new, _, completion = do_replan(plan3(), Scripted("I would explore more."))
    assert completion is not None and "health rules only" in new.author
    assert "unparsable" in new.notes and new.decisions[0].action == "keep"


def test_plan_messages_show_slots_health_and_leaderboard():
    plan = plan3()
    health = branch_health(plan, nodes3(), round_of, 6, "pilot", True)
    prompt = plan_messages(plan, health, build_leaderboard(nodes3(), "pilot", True), "predict churn",
                           "pilot")[-1]["content"]
    assert prompt.startswith("Plan request:") and is_plan_prompt(prompt) and not is_analysis_prompt(prompt)
    assert [(s.slot, s.branch_id, s.killed) for s in parse_plan_slots(prompt)] == [
        (1, "B1", False), (2, "B2", True), (3, "B3", True)]
    assert "| a3 | B1 | 0.8 | - |" in prompt and "SLOT <n>: keep" in prompt
    rows = [{"node": "a3", "branch": "B1", "score": 0.8, "full": 0.79}, {"node": "z", "branch": "-",
                                                                          "score": 0.1, "full": None}]
    prompt = plan_messages(plan, health, rows, "", "pilot")[-1]["content"]
    assert "| a3 | B1 | 0.8 | 0.79 |" in prompt and "| z | - | 0.1 | - |" in prompt


def test_plan_md_names_author_slots_and_retired_with_reason():
    first = plan3()
    new, health, _ = do_replan(first, None)
    text = plan_md(new, health, [first])
    assert text.splitlines()[0] == f"Author: {OFFLINE_AUTHOR}" and "offline" in text.splitlines()[0]
    assert "### Slot 1: B1" in text and "gradient boosting" in text and "stall_rounds=3" in text
    assert "B2 (slot 2, born in round 0): feature engineering — killed: no improvement" in text
    assert "| 1 | 0 |" in text and "| 2 | 6 |" in text
    assert "new branch: no candidates yet" in text  # B4, B5


def test_simulated_plan_answer_parses_into_a_decision_for_every_slot():
    plan = initial_plan("", 4, KILL, [])
    health = branch_health(plan, [], round_of, 5, "pilot", True)
    prompt = plan_messages(plan, health, [], "", "pilot")[-1]["content"]
    for seed in range(20):
        answer = build_answer(prompt, random.Random(seed))
        assert answer.startswith(SIM_PREFACE)
        answers = parse_plan_answer(answer, plan)
        assert all(a.stated for a in answers) and len(answers) == 4


def test_simulated_replan_says_simulated():
    class Sim(Scripted):
        async def complete(self, messages, *, temperature, max_tokens):
            self.text = build_answer(messages[-1]["content"], random.Random(3))
            return await super().complete(messages, temperature=temperature, max_tokens=max_tokens)

    new, _, _ = do_replan(plan3(), Sim(""))
    assert new.author == SIMULATED_AUTHOR
    assert [d.action for d in new.decisions][1:] == ["retire", "retire"]  # the killed ones


def test_offline_backend_keeps_every_slot():
    prompt = plan_messages(plan3(), {}, [], "", "pilot")[-1]["content"]
    answer = run(OfflineBackend().complete([{"role": "user", "content": prompt}], temperature=0,
                                           max_tokens=10)).text
    assert answer == offline_plan_answer(prompt)
    assert [a.action for a in parse_plan_answer(answer, plan3())] == ["keep"] * 3


def test_the_plan_agent_may_tighten_kill_criteria_but_never_loosen_them_past_the_config():
    plan = initial_plan("", 2, KILL, ["one", "two"])
    answer = ("SLOT 1: keep\nSLOT 2: keep\nKILL 1: stall_rounds=99 invalid_rate=100%\n"
              "KILL 2: stall_rounds=2 invalid_rate=0.25\n")
    first, second = parse_plan_answer(answer, plan, KILL)
    assert (first.kill.stall_rounds, first.kill.max_invalid_rate) == (3, 0.5)  # capped at the config
    assert first.reason.endswith("; KILL capped: stall_rounds 99 -> 3, max_invalid_rate 1 -> 0.5 "
                                 "(the configured limits)")
    assert (second.kill.stall_rounds, second.kill.max_invalid_rate) == (2, 0.25)  # tightened: taken
    assert "capped" not in second.reason
    tightened = replace(plan, slots=(replace(plan.slots[0], kill=second.kill), plan.slots[1]))
    (again, _) = parse_plan_answer("KILL 1: stall_rounds=3\n", tightened, KILL)
    assert again.kill.stall_rounds == 3  # back up to the configured value: allowed, no further
