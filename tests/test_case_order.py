"""Cases that keep passing move to the back of the validation order; a failure brings them back."""

from __future__ import annotations

import json

import pytest

from evoforge.stages.population.case_order import CaseOrder, partial_score

CASES = ["a", "b", "c", "d"]
REFERENCE = {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.5}


def passing(*cases: str) -> dict[str, float]:
    """Scores where ``cases`` beat the reference and every other case loses to it."""
    return {c: (1.0 if c in cases else 0.0) for c in CASES}


def test_a_case_moves_back_only_after_window_passes_in_a_row() -> None:
    order = CaseOrder(CASES, window=3)
    order.update(passing("a"), REFERENCE)
    order.update(passing("a"), REFERENCE)
    assert order.order == CASES and order.streak("a") == 2
    order.update(passing("a"), REFERENCE)
    assert order.order == ["b", "c", "d", "a"]


def test_a_failure_resets_the_streak() -> None:
    order = CaseOrder(CASES, window=2)
    order.update(passing("a"), REFERENCE)
    order.update(passing(), REFERENCE)
    order.update(passing("a"), REFERENCE)
    assert order.streak("a") == 1 and order.order == CASES


def test_groups_keep_their_relative_order() -> None:
    order = CaseOrder(CASES, window=1)
    order.update(passing("a", "c"), REFERENCE)
    assert order.order == ["b", "d", "a", "c"]
    order.update(passing("a", "b", "c", "d"), REFERENCE)
    assert order.order == ["b", "d", "a", "c"]  # all in the back group: order unchanged


def test_a_case_that_fails_again_comes_forward() -> None:
    order = CaseOrder(CASES, window=1)
    order.update(passing("a", "b"), REFERENCE)
    assert order.order == ["c", "d", "a", "b"]
    order.update(passing("a"), REFERENCE)  # b fails now
    assert order.order == ["c", "d", "b", "a"]
    assert order.streak("b") == 0


def test_a_tie_passes_and_direction_is_respected() -> None:
    order = CaseOrder(["x", "y"], window=1)
    order.update({"x": 0.5, "y": 0.4}, {"x": 0.5, "y": 0.5})
    assert order.order == ["y", "x"]
    lower = CaseOrder(["x", "y"], window=1)
    lower.update({"x": 0.6, "y": 0.4}, {"x": 0.5, "y": 0.5}, maximize=False)
    assert lower.order == ["x", "y"] and lower.streak("y") == 1 and lower.streak("x") == 0


def test_cases_missing_from_the_scores_or_the_reference_keep_their_streak() -> None:
    order = CaseOrder(CASES, window=2)
    order.update(passing("a", "b"), REFERENCE)
    order.update({"a": 1.0}, REFERENCE)  # b not evaluated this round (pruned early)
    assert order.streak("b") == 1 and order.streak("a") == 2
    order.update({"b": 1.0, "zzz": 1.0}, {"a": 0.5})  # no reference for b; unknown id ignored
    assert order.streak("b") == 1
    order.update({"b": float("nan")}, REFERENCE)
    assert order.streak("b") == 1
    assert order.order == ["b", "c", "d", "a"]


def test_state_round_trips_through_json() -> None:
    order = CaseOrder(CASES, window=2)
    order.update(passing("a"), REFERENCE)
    order.update(passing("a", "c"), REFERENCE)
    again = CaseOrder.from_state(json.loads(json.dumps(order.state())))
    assert again.order == order.order == ["b", "c", "d", "a"]
    assert again.window == 2 and [again.streak(c) for c in CASES] == [2, 0, 1, 0]
    again.update(passing("a", "c"), REFERENCE)
    order.update(passing("a", "c"), REFERENCE)
    assert again.order == order.order == ["b", "d", "c", "a"]


def test_bad_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="repeat"):
        CaseOrder(["a", "a"])
    with pytest.raises(ValueError, match="window"):
        CaseOrder(CASES, window=0)
    with pytest.raises(ValueError, match="not in the order"):
        CaseOrder.from_state({"window": 3, "order": ["a"], "streaks": {"b": 1}})


def test_partial_score_is_the_mean() -> None:
    assert partial_score({}) is None
    assert partial_score({"a": 1.0, "b": 0.5}) == 0.75
