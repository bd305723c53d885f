"""The built-in `house_style` text task: its files, its seeded cases, its metric and its feedback."""

from __future__ import annotations

import asyncio
import doctest
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

TASK = Path(__file__).resolve().parents[1] / "evaluators" / "tasks" / "house_style"
PERFECT = "Answer: 42.\n(a second line is never read)"
BROKEN = {  # rule -> an answer to "17 + 25" that breaks that rule alone
    "prefix": "42.",
    "digits": "Answer: forty-two.",
    "lowercase": "Answer: 42 Is it.",
    "brief": "Answer: it is surely 42.",
    "full_stop": "Answer: 42",
}


def load_evaluator() -> ModuleType:
    """The task's evaluator module, imported from its file as the engine does."""
    spec = importlib.util.spec_from_file_location("house_style_evaluator", TASK / "evaluator.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def task() -> ModuleType:
    return load_evaluator()


def _case(rules: list[str], answer: int = 42) -> dict:
    return {"id": "x-0", "question": "What is 17 + 25?", "answer": answer, "rules": rules}


def test_task_yaml_names_a_text_task_with_its_prompt() -> None:
    spec = yaml.safe_load((TASK / "task.yaml").read_text())
    assert set(spec) == {"name", "kind", "prompt", "description", "objective"}
    assert (spec["name"], spec["kind"], spec["prompt"]) == ("house_style", "text", "prompt.md")
    assert spec["objective"] == {"metric": "combined_score", "direction": "maximize"}
    assert "first non-empty line" in spec["description"] and "feedback" in spec["description"]
    prompt = (TASK / "prompt.md").read_text()
    assert 0 < len(prompt.splitlines()) <= 2 and "Answer:" not in prompt


def test_cases_have_the_documented_splits_and_unique_ids(task: ModuleType) -> None:
    cases = task.cases()
    assert {split: len(items) for split, items in cases.items()} == {"train": 120, "val": 40, "test": 60}
    ids = [case["id"] for items in cases.values() for case in items]
    assert len(ids) == len(set(ids)) == 220
    for case in (case for items in cases.values() for case in items):
        assert 2 <= len(case["rules"]) <= 4 and set(case["rules"]) <= set(task.RULES)
        assert isinstance(case["answer"], int) and case["answer"] >= 0


def test_cases_are_the_same_on_every_call(task: ModuleType) -> None:
    assert task.cases() == task.cases() == load_evaluator().cases()


def test_every_rule_is_checked_somewhere_in_val(task: ModuleType) -> None:
    checked = {rule for case in task.cases()["val"] for rule in case["rules"]}
    assert checked == set(task.RULES)


def test_a_perfect_answer_scores_one_with_no_feedback(task: ModuleType) -> None:
    case = _case(list(task.RULES))
    assert task.metric(case, PERFECT) == 1.0
    assert task.feedback(case, PERFECT, 1.0) == ""


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_rule_broken_alone_loses_its_share_and_names_itself(task: ModuleType, rule: str) -> None:
    case = _case(list(task.RULES))
    output = BROKEN[rule]
    score = task.metric(case, output)
    assert score == pytest.approx(1 - 1 / (1 + len(task.RULES)))
    assert task.feedback(case, output, score).splitlines() == [task.PHRASES[rule]]
    unchecked = _case([r for r in task.RULES if r != rule])
    assert task.metric(unchecked, output) == 1.0  # a rule the case does not check costs nothing


def test_a_wrong_number_fails_correctness_only(task: ModuleType) -> None:
    case = _case(list(task.RULES), answer=43)
    score = task.metric(case, PERFECT)
    assert score == pytest.approx(5 / 6)
    assert task.feedback(case, PERFECT, score) == task.PHRASES["correct"]


@pytest.mark.parametrize("output", ["Answer: one hundred forty-two.", "Answer: 42 or 43.", "", "\n\n"])
def test_only_the_right_number_alone_is_correct(task: ModuleType, output: str) -> None:
    assert task.metric(_case([]), output) == 0.0


def test_the_answer_is_the_first_non_empty_line(task: ModuleType) -> None:
    case = _case(list(task.RULES))
    assert task.metric(case, "\n  \nAnswer: 42.\nThe result is forty-two, I believe!") == 1.0
    assert task.metric(_case([]), "The result is forty-two, I believe!") == 1.0  # words are correct too


def test_run_sends_the_prompt_as_system_message_and_lets_errors_through(task: ModuleType) -> None:
    seen: list[list[dict]] = []

    async def llm(messages: list[dict]) -> str:
        seen.append(messages)
        return "Answer: 42."

    case = task.cases()["val"][0]
    assert asyncio.run(task.run("Be good.", case, llm)) == "Answer: 42."
    assert seen == [[{"role": "system", "content": "Be good."},
                     {"role": "user", "content": f"Question: {case['question']}"}]]

    async def failing(messages: list[dict]) -> str:
        raise RuntimeError("the task model is down")

    with pytest.raises(RuntimeError, match="down"):
        asyncio.run(task.run("Be good.", case, failing))


def test_the_evaluator_docstring_examples_run(task: ModuleType) -> None:
    results = doctest.testmod(task, optionflags=doctest.ELLIPSIS)
    assert results.attempted >= 3 and results.failed == 0
