"""The Optuna study of one structure: TPE settings, trial counts, failures, resume, parallelism, telemetry."""

from __future__ import annotations

import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.samplers import TPESampler
from optuna.trial import TrialState

from evoforge.stages.tuning.param_space import ParamSpace, parse_space
from evoforge.stages.tuning.param_study import (
    INTERRUPTED,
    StudySettings,
    TrialOutcome,
    open_study,
    run_study,
    trials_json,
)

SPACE = parse_space(
    'x = knob("x", 0.0, low=-5.0, high=5.0)\n'
    'n = knob("n", 3, low=1, high=20)\n'
    'kind = knob("kind", "a", choices=["a", "b"])\n'
)
DEFAULT = TrialOutcome(value=-2.6, seconds=0.5, cpu_s=0.4)


def objective(params: dict[str, Any]) -> float:
    """A cheap formula of the params, best at x=1, n=7, kind="b"."""
    return -((params["x"] - 1.0) ** 2) - (params["n"] - 7) ** 2 / 10 + (params["kind"] == "b")


class Recorder:
    """An evaluate callable that computes ``objective`` and remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, Any]]] = []

    async def __call__(self, number: int, params: dict[str, Any]) -> TrialOutcome:
        self.calls.append((number, dict(params)))
        return TrialOutcome(value=objective(params), seconds=0.01, cpu_s=0.005)


def url(tmp_path: Path, name: str = "optuna.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def run(tmp_path: Path, evaluate: Any, settings: StudySettings | None = None, **kwargs: Any) -> Any:
    coro = run_study(SPACE, settings or StudySettings(), url(tmp_path), "node-1", evaluate, **kwargs)
    return asyncio.run(coro)


def seed_of(sampler: TPESampler) -> np.ndarray:
    return sampler._random_sampler._rng.rng.get_state()[1]


def test_study_uses_tpe_with_the_settings(tmp_path: Path) -> None:
    sampler = open_study(StudySettings(seed=3), url(tmp_path), "serial").sampler
    assert isinstance(sampler, TPESampler)
    assert sampler._n_startup_trials == 5
    assert sampler._constant_liar is False
    assert np.array_equal(seed_of(sampler), np.random.RandomState(3).get_state()[1])
    parallel = open_study(StudySettings(parallel=2), url(tmp_path), "parallel").sampler
    assert parallel._constant_liar is True


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="direction"):
        StudySettings(direction="up")
    with pytest.raises(ValueError, match="parallel"):
        StudySettings(parallel=0)
    with pytest.raises(ValueError, match="trials"):
        StudySettings(trials=-1)


def test_twelve_new_trials_and_the_default_is_never_evaluated(tmp_path: Path) -> None:
    evaluate = Recorder()
    result = run(tmp_path, evaluate, default=DEFAULT)
    assert len(evaluate.calls) == 12 and result.ran_now == 12
    assert [number for number, _ in evaluate.calls] == list(range(1, 13))
    assert [t.number for t in result.trials] == list(range(13))
    first = result.trials[0]
    assert first.source == "default" and first.params == SPACE.defaults()
    assert (first.value, first.seconds, first.cpu_s, first.state) == (-2.6, 0.5, 0.4, "COMPLETE")
    # TPE samples at random until 5 trials are complete, the default among them.
    assert [t.source for t in result.trials[1:]] == ["random"] * 4 + ["tpe"] * 8
    assert all(t.state == "COMPLETE" and t.seconds == 0.01 and t.cpu_s == 0.005 for t in result.trials[1:])
    for number, params in evaluate.calls:
        assert result.trials[number].params == params
        assert result.trials[number].value == objective(params)
    best = max(result.trials, key=lambda t: t.value)
    assert result.best_value == best.value and result.best_params == best.params
    stored = optuna.load_study(study_name="node-1", storage=url(tmp_path)).trials
    assert len(stored) == 13 and stored[0].user_attrs["source"] == "default"


def test_a_default_that_failed_is_recorded_as_failed(tmp_path: Path) -> None:
    evaluate = Recorder()
    result = run(tmp_path, evaluate, StudySettings(trials=3), default=TrialOutcome(value=None, error="boom"))
    assert len(evaluate.calls) == 3
    first = result.trials[0]
    assert (first.source, first.state, first.error, first.value) == ("default", "FAIL", "boom", None)


def test_without_a_default_only_new_trials_run(tmp_path: Path) -> None:
    evaluate = Recorder()
    result = run(tmp_path, evaluate, StudySettings(trials=4))
    assert [t.number for t in result.trials] == [0, 1, 2, 3]
    assert {t.source for t in result.trials} == {"random"}


def test_failing_trials_are_recorded_and_the_study_goes_on(tmp_path: Path) -> None:
    calls: list[int] = []

    async def evaluate(number: int, params: dict[str, Any]) -> TrialOutcome:
        calls.append(number)
        if number == 3:
            raise RuntimeError("sandbox exploded")
        if number == 5:
            return TrialOutcome(value=None, error="timed out after 30s", seconds=30.0)
        if number == 6:
            return TrialOutcome(value=float("nan"))
        return TrialOutcome(value=objective(params))

    result = run(tmp_path, evaluate, default=DEFAULT)
    assert len(calls) == 12
    by_number = {t.number: t for t in result.trials}
    assert (by_number[3].state, by_number[3].error) == ("FAIL", "RuntimeError: sandbox exploded")
    assert (by_number[5].state, by_number[5].error, by_number[5].seconds) == (
        "FAIL",
        "timed out after 30s",
        30.0,
    )
    assert by_number[6].state == "FAIL" and "nan" in by_number[6].error
    assert sum(t.state == "FAIL" for t in result.trials) == 3
    assert result.saturation["failed"] == 3.0 and result.saturation["completed"] == 9.0


def test_cancellation_raised_by_evaluate_propagates(tmp_path: Path) -> None:
    async def evaluate(number: int, params: dict[str, Any]) -> TrialOutcome:
        if number == 2:
            raise asyncio.CancelledError
        return TrialOutcome(value=1.0)

    with pytest.raises(asyncio.CancelledError):
        run(tmp_path, evaluate)


@pytest.mark.parametrize("startup", [5, 12], ids=["tpe-phase", "random-phase"])
def test_resume_mid_way_runs_only_the_rest(tmp_path: Path, startup: int) -> None:
    settings = StudySettings(startup=startup)
    first_calls: list[tuple[int, dict[str, Any]]] = []

    async def killed_run() -> None:
        started = asyncio.Event()

        async def evaluate(number: int, params: dict[str, Any]) -> TrialOutcome:
            first_calls.append((number, dict(params)))
            if len(first_calls) == 6:
                started.set()
                await asyncio.sleep(3600)
            return TrialOutcome(value=objective(params))

        task = asyncio.create_task(
            run_study(SPACE, settings, url(tmp_path), "node-1", evaluate, default=DEFAULT)
        )
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(killed_run())
    assert len(first_calls) == 6
    stored = optuna.load_study(study_name="node-1", storage=url(tmp_path)).trials
    assert [t.state for t in stored] == [TrialState.COMPLETE] * 6 + [TrialState.RUNNING]
    finished_before = 5
    finished_params = [params for _, params in first_calls[:finished_before]]

    evaluate = Recorder()
    result = run(tmp_path, evaluate, settings, default=DEFAULT)
    assert len(evaluate.calls) == 12 - finished_before
    assert result.ran_now == 12 - finished_before
    assert all(params not in finished_params for _, params in evaluate.calls)
    assert all(number > 6 for number, _ in evaluate.calls)
    interrupted = result.trials[6]
    assert (interrupted.state, interrupted.error, interrupted.source) == ("FAIL", INTERRUPTED, "resumed")
    assert [t.source for t in result.trials[1:6]] == ["resumed"] * 5
    assert result.trials[0].source == "default"
    counted = [t for t in result.trials if t.source != "default" and t.error != INTERRUPTED]
    assert len(counted) == 12 and all(t.state == "COMPLETE" for t in counted)
    assert result.saturation["completed"] == 12.0 and result.saturation["failed"] == 0.0


def test_a_finished_study_runs_nothing_more(tmp_path: Path) -> None:
    run(tmp_path, Recorder(), StudySettings(trials=4), default=DEFAULT)
    again = Recorder()
    result = run(tmp_path, again, StudySettings(trials=4), default=DEFAULT)
    assert again.calls == [] and result.ran_now == 0
    assert len(result.trials) == 5 and sum(t.source == "default" for t in result.trials) == 1


def test_trials_left_running_are_failed_as_interrupted_and_asked_again(tmp_path: Path) -> None:
    study = open_study(StudySettings(), url(tmp_path), "node-1")
    study.ask(fixed_distributions=SPACE.distributions())  # a trial whose process died
    evaluate = Recorder()
    result = run(tmp_path, evaluate, StudySettings(trials=3))
    assert len(evaluate.calls) == 3
    assert (result.trials[0].state, result.trials[0].error) == ("FAIL", INTERRUPTED)
    assert result.saturation["failed"] == 0.0


def test_parallel_keeps_at_most_two_evaluations_in_flight(tmp_path: Path) -> None:
    in_flight = 0
    peak = 0
    calls = 0

    async def evaluate(number: int, params: dict[str, Any]) -> TrialOutcome:
        nonlocal in_flight, peak, calls
        calls += 1
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01 * (1 + number % 3))
        in_flight -= 1
        return TrialOutcome(value=objective(params))

    result = run(tmp_path, evaluate, StudySettings(parallel=2), default=DEFAULT)
    assert peak == 2 and calls == 12
    assert len(result.trials) == 13 and all(t.state == "COMPLETE" for t in result.trials)


def by_number(values: dict[int, float]) -> Any:
    async def evaluate(number: int, params: dict[str, Any]) -> TrialOutcome:
        return TrialOutcome(value=values[number])

    return evaluate


def test_saturation_when_the_second_half_still_improves(tmp_path: Path) -> None:
    values = {n: float(n) for n in range(1, 13)}
    result = run(tmp_path, by_number(values), default=TrialOutcome(value=100.0))
    sat = result.saturation
    assert (sat["first_half_best"], sat["second_half_best"], sat["improved"]) == (6.0, 12.0, 1.0)
    assert sat["spread"] == pytest.approx(statistics.pstdev(values.values()))
    assert (sat["completed"], sat["failed"]) == (12.0, 0.0)
    assert result.best_value == 100.0 and result.best_params == SPACE.defaults()


def test_saturation_when_the_values_peak_early(tmp_path: Path) -> None:
    values = {n: (50.0 if n == 2 else float(n)) for n in range(1, 13)}
    result = run(tmp_path, by_number(values), default=DEFAULT)
    sat = result.saturation
    assert (sat["first_half_best"], sat["second_half_best"], sat["improved"]) == (50.0, 12.0, 0.0)
    assert result.best_value == 50.0 and result.best_params == result.trials[2].params


def test_minimize_picks_the_lowest_value(tmp_path: Path) -> None:
    values = {n: float(20 - n) for n in range(1, 13)}
    settings = StudySettings(direction="minimize")
    result = run(tmp_path, by_number(values), settings, default=TrialOutcome(value=30.0))
    assert result.best_value == 8.0 and result.best_params == result.trials[12].params
    assert (result.saturation["first_half_best"], result.saturation["improved"]) == (14.0, 1.0)


def test_no_completed_trial_gives_the_defaults(tmp_path: Path) -> None:
    async def evaluate(number: int, params: dict[str, Any]) -> TrialOutcome:
        return TrialOutcome(value=None, error="crashed")

    result = run(tmp_path, evaluate, StudySettings(trials=3))
    assert result.best_value is None and result.best_params == SPACE.defaults()
    sat = result.saturation
    assert (sat["first_half_best"], sat["second_half_best"], sat["improved"], sat["spread"]) == (
        None,
        None,
        0.0,
        None,
    )


def test_same_seed_same_params_sequence(tmp_path: Path) -> None:
    def sequence(name: str, seed: int) -> list[dict[str, Any]]:
        evaluate = Recorder()
        coro = run_study(SPACE, StudySettings(seed=seed), url(tmp_path, name), "node-1", evaluate, DEFAULT)
        asyncio.run(coro)
        return [params for _, params in evaluate.calls]

    first = sequence("a.db", seed=7)
    assert sequence("b.db", seed=7) == first
    assert sequence("c.db", seed=8) != first


def test_empty_space_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty parameter space"):
        asyncio.run(run_study(ParamSpace(), StudySettings(), url(tmp_path), "node-1", Recorder()))


def test_direction_of_an_existing_study_must_match(tmp_path: Path) -> None:
    run(tmp_path, Recorder(), StudySettings(trials=1))
    with pytest.raises(ValueError, match="created to maximize, not to minimize"):
        run(tmp_path, Recorder(), StudySettings(trials=1, direction="minimize"))


def test_trials_json_holds_space_trials_best_and_saturation(tmp_path: Path) -> None:
    result = run(tmp_path, Recorder(), StudySettings(trials=3), default=DEFAULT)
    payload = json.loads(trials_json(result, "node-1", SPACE))
    assert payload["node"] == "node-1"
    assert [knob["name"] for knob in payload["space"]] == ["x", "n", "kind"]
    assert payload["space"][2]["choices"] == ["a", "b"]
    assert [t["number"] for t in payload["trials"]] == [0, 1, 2, 3]
    assert payload["trials"][0]["source"] == "default"
    assert payload["best"] == {"params": result.best_params, "value": result.best_value}
    assert payload["saturation"] == result.saturation and payload["ran_now"] == 3
