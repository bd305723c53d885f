"""The circle-packing task scores valid packings and rejects invalid ones; OpenEvolve folders run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.evaluators.task import Task, load_task
from evoforge.infra.evolve_block import split_program

FIXTURE = Path(__file__).parent / "fixtures" / "openevolve_task"


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task("circle_packing")


def run(task: Task, code: str) -> EvalOutcome:
    return asyncio.run(evaluate_program(task, code))


def with_block(task: Task, block: str) -> str:
    """The seed program with its EVOLVE block replaced."""
    return split_program(task.initial_code).join(block)


def fixed_packing(centers: str, radii: str) -> str:
    return f"""
def construct_packing():
    centers = np.array({centers}, dtype=float)
    radii = np.array({radii}, dtype=float)
    return centers, radii, float(np.sum(radii))
"""


def grid(x: float = 0.2, y: float = 0.2) -> str:
    """A 5x5 grid of centres plus a 26th centre at (x, y); (0.2, 0.2) sits in a gap."""
    return f"[[0.1 + 0.2 * (k % 5), 0.1 + 0.2 * (k // 5)] for k in range(25)] + [[{x}, {y}]]"


RADII = "[0.09] * 25 + [0.05]"


def test_seed_program_scores_in_the_expected_range(task: Task) -> None:
    outcome = run(task, task.initial_code)
    assert outcome.ok, outcome.error
    assert 1.0 <= outcome.score <= 1.9
    assert outcome.metrics["sum_radii"] == outcome.score
    assert outcome.metrics["validity"] == 1.0
    assert outcome.metrics["target_ratio"] == pytest.approx(outcome.score / 2.635)


def test_valid_grid_packing_scores_its_sum(task: Task) -> None:
    outcome = run(task, with_block(task, fixed_packing(grid(), RADII)))
    assert outcome.ok, outcome.error
    assert outcome.score == pytest.approx(2.3)


def test_overlapping_circles_fail_with_the_pair_named(task: Task) -> None:
    outcome = run(task, with_block(task, fixed_packing(grid(0.19, 0.25), RADII)))
    assert not outcome.ok
    assert "circle 5 overlaps circle 25 by 0.037" in outcome.error
    assert outcome.error.startswith("evaluator raised ValueError")


def test_circle_outside_the_square_fails(task: Task) -> None:
    outcome = run(task, with_block(task, fixed_packing(grid(0.98, 0.2), RADII)))
    assert not outcome.ok
    expected = "circle 25 at (0.980000, 0.200000) with radius 0.050000 leaves the unit square by 0.03"
    assert expected in outcome.error


def test_wrong_shape_fails(task: Task) -> None:
    outcome = run(task, with_block(task, fixed_packing(f"({grid()})[:25]", RADII)))
    assert not outcome.ok
    assert "centers has shape (25, 2), expected (26, 2)" in outcome.error


def test_misreported_sum_fails(task: Task) -> None:
    block = fixed_packing(grid(), RADII).replace(
        "float(np.sum(radii))", "float(np.sum(radii)) + 1.0"
    )
    outcome = run(task, with_block(task, block))
    assert not outcome.ok and "reported sum_radii" in outcome.error


def test_openevolve_folder_runs_unchanged_through_the_cascade() -> None:
    task = load_task(FIXTURE)
    outcome = run(task, task.initial_code)
    assert outcome.ok, outcome.error
    assert outcome.cascade_step == 2
    assert {"stage1_value", "reliability"} <= set(outcome.metrics)  # stages merged
    assert outcome.artifacts["values"].count(",") == 2  # from the EvaluationResult of stage 2
    assert 0.6 < outcome.score < 1.0


def test_program_below_stage1_threshold_stops_at_stage_1() -> None:
    task = load_task(FIXTURE)
    split = split_program(task.initial_code)
    poor = split.join("def search_algorithm():\n    return 40.0, 40.0, 0.0\n")
    outcome = run(task, poor)
    assert outcome.ok, outcome.error
    assert outcome.cascade_step == 1
    assert "reliability" not in outcome.metrics
    assert outcome.score < 0.3


def test_openevolve_error_result_is_recorded_with_its_score() -> None:
    task = load_task(FIXTURE)
    broken = split_program(task.initial_code).join(
        "def search_algorithm():\n    return 1.0, float('nan'), 0.0\n"
    )
    outcome = run(task, broken)
    assert outcome.ok and outcome.score == 0.0  # OpenEvolve keeps it, with combined_score 0.0
    assert outcome.artifacts["error"].startswith("search returned a non-finite")
    assert outcome.cascade_step == 1  # 0.0 is below the stage-1 threshold


def test_exception_in_a_later_stage_fails_with_that_stage_named() -> None:
    task = load_task(FIXTURE)
    flaky = split_program(task.initial_code).join(
        "CALLS = []\n\n\ndef search_algorithm():\n    CALLS.append(1)\n"
        "    if len(CALLS) > 1:\n        raise RuntimeError('unstable search')\n"
        "    return 1.0, -2.0, 0.0\n"
    )
    outcome = run(task, flaky)
    assert not outcome.ok
    assert outcome.cascade_step == 2
    assert outcome.error.startswith("evaluator raised RuntimeError: unstable search")
    assert "evaluate_stage2()" in outcome.error
