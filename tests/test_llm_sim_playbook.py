"""The simulator as a task model and as a curator for playbooks, on the unit_playbook task."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Iterator

import openai
import pytest

from evoforge.infra.llm_sim.answers import build_answer
from evoforge.infra.llm_sim.playbook_edits import (
    GENERIC_STRATEGIES,
    MAX_CONVERSIONS,
    MOTIVATION,
    PLAYBOOK_LANGUAGE,
    REWORD_SUFFIX,
    read_bullets,
)
from evoforge.infra.llm_sim.playbook_model import stated_factors
from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig
from evoforge.infra.llm_sim.task_model import SIMULATED_LINE, is_task_model_call, task_model_answer
from evoforge.infra.prompt_format import render_feedback_section, render_program_section
from tests.test_unit_playbook_task import FACTORS, TASK, load_evaluator

UNITS = load_evaluator()
INITIAL = (TASK / "playbook.md").read_text()
TO = {unit: to for unit, _, to, _ in UNITS.PAIRS}
ALL_FACTORS = INITIAL + "".join(f"[conv-{i}] helpful=0 harmful=0 :: 1 {unit} = {factor} {TO[unit]}\n"
                                for i, (unit, factor) in enumerate(FACTORS.items(), start=10))
FEEDBACK_LINES = 12  # as many failed cases as a research prompt shows (evaluators/task_model.py)
_JSON_RE = re.compile(r"```json\n(.*?)\n```", re.S)
_HEAD_RE = re.compile(r"\[(\S+)\] helpful=(\d+) harmful=(\d+)")


async def _sim_llm(messages: list[dict]) -> str:
    return task_model_answer(messages[0]["content"], messages[-1]["content"])


def _val(playbook: str) -> list[tuple[dict, str]]:
    """(case, output) of every val case, run through the task's run() with the simulated model."""

    async def every() -> list[str]:
        return [await UNITS.run(playbook, case, _sim_llm) for case in UNITS.cases()["val"]]

    return list(zip(UNITS.cases()["val"], asyncio.run(every()), strict=True))


def _score(playbook: str) -> float:
    results = _val(playbook)
    return sum(UNITS.metric(case, output) for case, output in results) / len(results)


def _feedback_lines(playbook: str) -> list[str]:
    lines = [f"[{case['id']}] {UNITS.feedback(case, output, UNITS.metric(case, output))}"
             for case, output in _val(playbook) if UNITS.metric(case, output) < 1.0]
    return lines[:FEEDBACK_LINES]


def _research(playbook: str, feedback: list[str], form: str = "diff") -> str:
    program = render_program_section(playbook, PLAYBOOK_LANGUAGE)
    return (f"# Task: unit_playbook\nImprove the playbook.\n{program}\n"
            + (render_feedback_section(feedback) if feedback else "") + f"\nAnswer format: {form}\n")


def _operations(answer: str) -> list[dict]:
    assert answer.startswith(MOTIVATION) and len(_JSON_RE.findall(answer)) == 1
    return json.loads(_JSON_RE.search(answer).group(1))["operations"]


def _apply(playbook: str, operations: list[dict]) -> str:
    """The playbook after the operations: a small applier for these tests (ids <prefix>-N)."""
    sections: dict[str, list[list]] = {}
    current: list[list] = []
    for line in playbook.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif line.strip():
            head, content = line.split(" :: ", 1)
            bullet_id, helpful, harmful = _HEAD_RE.fullmatch(head).groups()
            current.append([bullet_id, int(helpful), int(harmful), content])
    bullets = {b[0]: (name, b) for name, items in sections.items() for b in items}
    for op in operations:
        if op["type"] == "ADD":
            prefix = {"CONVERSIONS": "conv", "STRATEGIES": "strat"}[op["section"]]
            number = 1 + max(int(i.split("-")[1]) for i in bullets if i.startswith(prefix + "-"))
            bullet = [f"{prefix}-{number}", 0, 0, op["content"]]
            sections[op["section"]].append(bullet)
            bullets[bullet[0]] = (op["section"], bullet)
        elif op["type"] == "UPDATE":
            bullets[op["id"]][1][3] = op["content"]
        elif op["type"] == "REMOVE":
            name, bullet = bullets.pop(op["id"])
            sections[name].remove(bullet)
        else:
            bullets[op["id"]][1][1 if op["tag"] == "helpful" else 2] += 1
    return "".join(f"## {name}\n" + "".join(f"[{i}] helpful={h} harmful={x} :: {c}\n" for i, h, x, c in items)
                   for name, items in sections.items())


def test_the_initial_playbook_knows_one_pair_of_eight() -> None:
    assert _score(INITIAL) == 1 / 8


def test_a_playbook_with_every_factor_scores_one() -> None:
    assert _score(ALL_FACTORS) == 1.0


@pytest.mark.parametrize("playbook", [INITIAL, ALL_FACTORS, ""])
def test_every_output_has_the_simulated_second_line(playbook: str) -> None:
    for _, output in _val(playbook):
        assert output.splitlines()[1] == SIMULATED_LINE and len(output.splitlines()) == 2


def test_a_conversion_is_answered_from_the_stated_factor_only() -> None:
    assert task_model_answer(INITIAL, "Question: Convert 12 miles to km.") == f"19.308 km\n{SIMULATED_LINE}"
    unknown = task_model_answer(INITIAL, "Question: Convert 12 pounds to kg.").splitlines()[0]
    assert unknown == "I do not know the factor from pounds to kg."
    plural = task_model_answer("1 Foot = 0.3048 meters", "Convert 20 feet to metres.")
    assert plural.startswith("6.096 metres\n")
    reverse = task_model_answer("1 km = 0.6214 miles", "Convert 12 miles to km.").splitlines()[0]
    assert reverse == "I do not know the factor from miles to km."  # a factor reads one way only


def test_counters_are_not_factors_and_the_first_factor_wins() -> None:
    playbook = "[c-1] helpful=1 harmful=0 :: 1 mile = 1.609 km\n[c-2] helpful=0 harmful=1 :: 1 mile = 2 km\n"
    assert stated_factors(playbook) == {("mile", "km"): "1.609"}


def test_house_style_questions_are_answered_as_before() -> None:
    answer = task_model_answer(ALL_FACTORS, "Question: What is 17 + 25?")
    assert answer == f"The result is forty-two, I believe!\n{SIMULATED_LINE}"
    assert is_task_model_call("Question: Convert 12 pounds to kg.")
    assert not is_task_model_call(_research(INITIAL, []))


@pytest.mark.parametrize("form", ["diff", "rewrite"])
def test_the_curator_adds_the_factors_the_feedback_shows(form: str) -> None:
    feedback = ["[val-1] Expected 5.443 kg for 12 pound; the answer was: I do not know the factor.",
                "[val-2] Expected 340.200 grams for 12 ounce; the answer was: I do not know the factor."]
    operations = _operations(build_answer(_research(INITIAL, feedback, form), random.Random(0)))
    adds = sorted(op["content"] for op in operations if op["type"] == "ADD")
    assert adds == ["1 ounce = 28.35 grams", "1 pound = 0.4536 kg"]
    assert all(op["section"] == "CONVERSIONS" for op in operations if op["type"] == "ADD")
    assert {"type": "TAG", "id": "strat-1", "tag": "helpful"} in operations
    new = _apply(INITIAL, operations)
    assert stated_factors(new) == {("mile", "km"): "1.609", ("pound", "kg"): "0.4536",
                                   ("ounce", "gram"): "28.35"}


def test_the_curator_adds_at_most_two_factors_and_tags_once() -> None:
    tagged = INITIAL.replace("[strat-1] helpful=0", "[strat-1] helpful=1")
    operations = _operations(build_answer(_research(tagged, _feedback_lines(tagged)), random.Random(3)))
    assert [op["type"] for op in operations] == ["ADD"] * MAX_CONVERSIONS


def test_the_curator_fixes_a_wrong_factor_with_an_update() -> None:
    wrong = INITIAL.replace("1 mile = 1.609 km", "1 mile = 1.6 km")
    feedback = ["[val-4] Expected 19.308 km for 12 mile; the answer was: 19.200 km"]
    operations = _operations(build_answer(_research(wrong, feedback), random.Random(0)))
    assert operations[0] == {"type": "UPDATE", "id": "conv-1", "content": "1 mile = 1.609 km"}


def test_the_largest_quantity_gives_the_factor() -> None:
    feedback = ["Expected 0.454 kg for 1 pound; x", "Expected 226.800 kg for 500 pound; x"]
    operations = _operations(build_answer(_research(INITIAL, feedback), random.Random(0)))
    assert operations[0]["content"] == "1 pound = 0.4536 kg"


@pytest.mark.parametrize("feedback", [[], ["[val-0] The answer must start with 'Answer:'."]])
def test_without_usable_feedback_the_curator_makes_a_harmless_change(feedback: list[str]) -> None:
    playbook, seen = ALL_FACTORS, []
    for _ in range(len(GENERIC_STRATEGIES) + 2):
        operations = _operations(build_answer(_research(playbook, feedback), random.Random(5)))
        assert len(operations) == 1 and operations[0]["type"] in ("ADD", "UPDATE")
        seen.append(operations[0]["type"])
        new = _apply(playbook, operations)
        assert new != playbook and stated_factors(new) == stated_factors(playbook) and _score(new) == 1.0
        playbook = new
    assert seen == ["ADD"] * len(GENERIC_STRATEGIES) + ["UPDATE"] * 2
    strategies = [b.content for b in read_bullets(playbook) if b.section == "STRATEGIES"]
    assert set(GENERIC_STRATEGIES) <= {s.removesuffix(REWORD_SUFFIX) for s in strategies}


def test_the_simulated_curator_learns_every_factor_in_six_rounds() -> None:
    rng, playbook, scores = random.Random(11), INITIAL, [_score(INITIAL)]
    for round_number in range(6):
        form = ("diff", "rewrite")[round_number % 2]
        answer = build_answer(_research(playbook, _feedback_lines(playbook), form), rng)
        playbook = _apply(playbook, _operations(answer))
        scores.append(_score(playbook))
    assert scores[0] == 1 / 8 and scores[-1] == 1.0
    assert scores == sorted(scores)  # every round keeps or raises the score
    assert {pair[0]: factor for pair, factor in stated_factors(playbook).items()} == FACTORS


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.1, slots=4, seed=1)) as process:
        yield process


async def _chat(sim: SimulatorProcess, messages: list[dict]) -> str:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0, timeout=10) as client:
        response = await client.chat.completions.create(model=sim.config.model, messages=messages)
    return response.choices[0].message.content or ""


def test_a_conversion_call_over_http_answers_from_the_playbook(sim: SimulatorProcess) -> None:
    async def llm(messages: list[dict]) -> str:
        return await _chat(sim, messages)

    for case in UNITS.cases()["val"][:4]:
        output = asyncio.run(UNITS.run(ALL_FACTORS, case, llm))
        assert output == f"{case['answer']:.3f} {case['to']}\n{SIMULATED_LINE}"
        assert UNITS.metric(case, output) == 1.0
        initial = asyncio.run(UNITS.run(INITIAL, case, llm))
        assert initial == asyncio.run(UNITS.run(INITIAL, case, _sim_llm))
        assert UNITS.metric(case, initial) == (case["from"] == "mile")


def test_a_research_prompt_over_http_gets_the_right_factors(sim: SimulatorProcess) -> None:
    messages = [{"role": "system", "content": "You curate playbooks."},
                {"role": "user", "content": _research(INITIAL, _feedback_lines(INITIAL))}]
    operations = _operations(asyncio.run(_chat(sim, messages)))
    adds = [op["content"] for op in operations if op["type"] == "ADD"]
    assert len(adds) == MAX_CONVERSIONS
    for content in adds:
        unit, factor, to = re.fullmatch(r"1 (\w+) = ([\d.]+) (\w+)", content).groups()
        assert factor == FACTORS[unit] and to == TO[unit]
