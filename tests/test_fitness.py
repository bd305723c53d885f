"""A candidate's score: the objective metric, else OpenEvolve's mean of the numeric metrics."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from evoforge.evaluators.fitness import objective_score, openevolve_fitness
from evoforge.evaluators.task import load_task

FIXTURE = Path(__file__).parent / "fixtures" / "openevolve_task"


@pytest.fixture(scope="module")
def task():
    return replace(load_task(FIXTURE), feature_dimensions=("size",))


def test_combined_score_is_the_score_even_beside_an_error_entry(task) -> None:
    score = objective_score(task, {"combined_score": 0.0, "other": 5.0}, {"error": "bad\ninput"})
    assert (score.value, score.failure, score.rule) == (0.0, None, None)


def test_without_combined_score_the_mean_leaves_out_features_flags_and_nan(task) -> None:
    metrics = {"a": 1.0, "b": 3.0, "size": 100.0, "timeout": 1.0, "c": math.nan}
    score = objective_score(task, metrics, {"note": "text"}, flags=["timeout"])
    assert score.value == 2.0 and score.failure is None
    assert score.rule.startswith("mean of 2 numeric metrics (a, b)")


def test_only_feature_dimensions_fall_back_to_their_mean_and_no_numbers_fail(task) -> None:
    assert openevolve_fitness({"size": 4.0}, (), ("size",)) == (4.0, ("size",))
    assert openevolve_fitness({}, (), ()) == (0.0, ())  # OpenEvolve's 0.0; evoforge fails it:
    failed = objective_score(task, {}, {"error": "could not run"})
    assert failed.value is None and failed.failure == "evaluator reported error: could not run"
    assert "missing from evaluator result" in objective_score(task, {}, {}).failure


def test_a_declared_objective_is_never_replaced_by_the_mean(task) -> None:
    declared = replace(task, objective="speed", objective_declared=True)
    score = objective_score(declared, {"a": 1.0}, {})
    assert score.value is None and score.failure.startswith("metric 'speed' missing")
    assert "not finite" in objective_score(declared, {"speed": math.inf}, {}).failure
    assert "not finite" in objective_score(task, {"a": math.inf}, {}).failure
