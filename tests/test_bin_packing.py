"""The bin-packing task scores heuristics case by case, the same way as a plain evaluation."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from evoforge.evaluators.cases import CaseOutcome, evaluate_cases, list_cases
from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.evaluators.task import Task, load_task
from evoforge.infra.evolve_block import split_program

BEST_FIT = "def priority(item, bins):\n    return -(bins - item)\n"
TUNED = (
    "def priority(item, bins):\n    gap = bins - item\n"
    "    return -gap - 50.0 * ((gap > 1.0) & (gap < 25.0))\n"
)


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task("bin_packing")


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def evaluator(task: Task) -> ModuleType:
    return load(task.evaluator_path, "bin_packing_evaluator")


@pytest.fixture(scope="module")
def seed_runs(task: Task) -> tuple[EvalOutcome, CaseOutcome, list[str]]:
    order = asyncio.run(list_cases(task))
    plain = asyncio.run(evaluate_program(task, task.initial_code))
    by_case = asyncio.run(evaluate_cases(task, task.initial_code, order))
    return plain, by_case, order


def with_block(task: Task, block: str) -> str:
    return split_program(task.initial_code).join(block)


def test_the_seed_scores_the_same_plain_and_case_by_case(task: Task, seed_runs) -> None:
    plain, by_case, order = seed_runs
    assert task.case_based and order == [str(i) for i in range(40)]
    assert plain.ok, plain.error
    assert by_case.ok, by_case.error
    assert by_case.cases_done == by_case.cases_total == 40
    assert by_case.score == pytest.approx(plain.score, abs=1e-9)
    assert by_case.metrics == pytest.approx(plain.metrics, abs=1e-9)
    assert 0.955 < plain.score < 0.962  # near best fit (0.958), far from what tuning reaches
    assert all(0.9 < s <= 1.0 for s in by_case.case_scores.values())
    assert plain.metrics["lower_bound"] < plain.metrics["bins"]


def test_a_nan_priority_fails_with_the_item_named(task: Task) -> None:
    code = with_block(task, "def priority(item, bins):\n    return bins * np.nan\n")
    outcome = asyncio.run(evaluate_cases(task, code, ["3", "0"]))
    assert not outcome.ok and outcome.cases_done == 0
    assert outcome.error.startswith("case 3 failed: evaluator raised ValueError: priority() returned NaN")
    assert "for item 1 " in outcome.error
    plain = asyncio.run(evaluate_program(task, code))
    assert not plain.ok and "priority() returned NaN or infinite scores" in plain.error


def test_a_wrongly_shaped_priority_fails(task: Task) -> None:
    code = with_block(task, "def priority(item, bins):\n    return -1.0\n")
    outcome = asyncio.run(evaluate_cases(task, code, ["0"]))
    assert not outcome.ok
    assert "priority() returned shape () for item 1 with 1 open bins that fit, expected (1,)" in outcome.error


def test_instances_are_deterministic_and_differ_across_ids(evaluator: ModuleType) -> None:
    items, capacity = evaluator.instance(6)
    again, _ = evaluator.instance("6")
    assert np.array_equal(items, again)
    assert not np.array_equal(items[:2500], evaluator.instance(8)[0][:2500])
    assert capacity == 150.0 and items.min() >= 20 and items.max() <= 100
    weibull, weibull_capacity = evaluator.instance(7)
    assert weibull_capacity == 100.0 and weibull.min() >= 1 and weibull.max() <= 100
    assert len({len(evaluator.instance(i)[0]) for i in range(10)}) > 1
    with pytest.raises(ValueError, match="no instance 40"):
        evaluator.instance(40)


def test_the_programs_run_online_packs_like_the_evaluator(task: Task, evaluator: ModuleType) -> None:
    program = load(task.root / task.program_name, "bin_packing_seed")
    for case in (0, 1):
        items, capacity = evaluator.instance(case)
        assert program.run_online(items, capacity) == evaluator.pack(program.priority, items, capacity)


def test_tuning_the_seed_knobs_beats_the_seed_and_best_fit(
    task: Task, evaluator: ModuleType, tmp_path: Path
) -> None:
    scores = {}
    seed = split_program(task.initial_code).block
    for name, block in (("best_fit", BEST_FIT), ("seed", seed), ("tuned", TUNED)):
        path = tmp_path / f"{name}.py"
        path.write_text(with_block(task, block))
        scores[name] = np.mean([evaluator.evaluate_case(str(path), c)["combined_score"] for c in range(6)])
    assert scores["best_fit"] < scores["seed"] < scores["tuned"] - 0.005
