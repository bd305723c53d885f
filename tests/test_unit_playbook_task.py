"""The built-in `unit_playbook` task: its files, its seeded cases, its metric and its feedback."""

from __future__ import annotations

import asyncio
import doctest
import importlib.util
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest
import yaml

TASK = Path(__file__).resolve().parents[1] / "evaluators" / "tasks" / "unit_playbook"
BULLET = re.compile(r"^\[[a-z]+-\d+\] helpful=\d+ harmful=\d+ :: \S.*$")
FACTORS = {"mile": "1.609", "pound": "0.4536", "inch": "2.54", "gallon": "3.785", "ounce": "28.35",
           "foot": "0.3048", "yard": "0.9144", "acre": "0.4047"}


def load_evaluator() -> ModuleType:
    """The task's evaluator module, imported from its file as the engine does."""
    spec = importlib.util.spec_from_file_location("unit_playbook_evaluator", TASK / "evaluator.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def task() -> ModuleType:
    return load_evaluator()


def _case(quantity: int = 12, unit: str = "pound", to: str = "kg", answer: float = 5.443) -> dict:
    return {"id": "x-0", "question": f"Convert {quantity} {unit}s to {to}.", "quantity": quantity,
            "from": unit, "to": to, "answer": answer}


def test_task_yaml_names_a_playbook_task_with_its_playbook() -> None:
    spec = yaml.safe_load((TASK / "task.yaml").read_text())
    assert set(spec) == {"name", "kind", "playbook", "description", "objective"}
    assert (spec["name"], spec["kind"], spec["playbook"]) == ("unit_playbook", "playbook", "playbook.md")
    assert spec["objective"] == {"metric": "combined_score", "direction": "maximize"}
    for words in ("convert", "delta operations", "feedback", "exactly"):
        assert words in spec["description"]


def test_the_initial_playbook_has_two_sections_of_one_bullet() -> None:
    lines = (TASK / "playbook.md").read_text().splitlines()
    assert [line for line in lines if line.startswith("## ")] == ["## CONVERSIONS", "## STRATEGIES"]
    bullets = [line for line in lines if not line.startswith("## ")]
    assert len(bullets) == 2 and all(BULLET.match(line) for line in bullets)
    assert bullets[0] == "[conv-1] helpful=0 harmful=0 :: 1 mile = 1.609 km"


def test_cases_have_the_documented_splits_and_unique_ids(task: ModuleType) -> None:
    cases = task.cases()
    assert {split: len(items) for split, items in cases.items()} == {"train": 120, "val": 40, "test": 60}
    ids = [case["id"] for items in cases.values() for case in items]
    assert len(ids) == len(set(ids)) == 220
    assert Counter(case["from"] for case in cases["val"]) == dict.fromkeys(FACTORS, 5)


def test_each_answer_is_the_exact_product_rounded_to_three_decimals(task: ModuleType) -> None:
    for case in (case for items in task.cases().values() for case in items):
        assert set(case) == {"id", "question", "quantity", "from", "to", "answer"}
        assert task.MIN_QUANTITY <= case["quantity"] <= task.MAX_QUANTITY
        exact = Decimal(FACTORS[case["from"]]) * case["quantity"]
        assert abs(Decimal(str(case["answer"])) - exact) <= Decimal("0.0005")
        assert re.fullmatch(rf"Convert {case['quantity']} [a-z]+ to {case['to']}\.", case["question"])


def test_cases_are_the_same_on_every_call(task: ModuleType) -> None:
    assert task.cases() == task.cases() == load_evaluator().cases()


@pytest.mark.parametrize("output", ["5.443 kg", "\n  \nThe answer is 5.443 kg.\nnoise", "12 pounds = 5.443"])
def test_a_right_first_line_scores_one_with_no_feedback(task: ModuleType, output: str) -> None:
    assert task.metric(_case(), output) == 1.0
    assert task.feedback(_case(), output, 1.0) == ""


@pytest.mark.parametrize("output", ["5.44 kg", "5.4430 kg", "15.443 kg", "5.442 kg", "", "kg\n5.443 kg"])
def test_anything_but_the_exact_number_in_the_first_line_scores_zero(task: ModuleType, output: str) -> None:
    assert task.metric(_case(), output) == 0.0


def test_the_answer_is_written_with_three_decimals(task: ModuleType) -> None:
    case = _case(quantity=100, unit="inch", to="cm", answer=254.0)
    assert task.metric(case, "254.000 cm") == 1.0 and task.metric(case, "254 cm") == 0.0


def test_feedback_is_one_fixed_line(task: ModuleType) -> None:
    expected = "Expected 5.443 kg for 12 pound; the answer was: 5.44 kg"
    assert task.feedback(_case(), "5.44 kg\nmore", 0.0) == expected
    case = _case(quantity=100, unit="inch", to="cm", answer=254.0)
    assert task.feedback(case, "", 0.0) == "Expected 254.000 cm for 100 inch; the answer was: (empty)"


def test_run_sends_the_playbook_as_system_message(task: ModuleType) -> None:
    seen: list[list[dict]] = []

    async def llm(messages: list[dict]) -> str:
        seen.append(messages)
        return "5.443 kg"

    case = task.cases()["val"][0]
    assert asyncio.run(task.run("## S\n", case, llm)) == "5.443 kg"
    assert seen == [[{"role": "system", "content": "## S\n"},
                     {"role": "user", "content": f"Question: {case['question']}"}]]


def test_the_evaluator_docstring_examples_run(task: ModuleType) -> None:
    results = doctest.testmod(task, optionflags=doctest.ELLIPSIS)
    assert results.attempted >= 3 and results.failed == 0
