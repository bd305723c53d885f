"""The built-in digits task scores a classifier at pilot, full and final on fixed, separate splits."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import EvalLevel, Task, load_task
from evoforge.infra.evolve_block import split_program

# a model that records every image it is fitted on or asked about, in the file named by params
SPY = '''
import json
import os

import numpy as np

LOG = json.loads(os.environ["EVOFORGE_PARAMS"])["log"]


class Spy:
    def fit(self, x, y):
        self._record("fit", x)
        return self

    def predict(self, x):
        self._record("predict", x)
        return np.zeros(len(x), dtype=int)

    def _record(self, what, x):
        with open(LOG, "a", encoding="utf-8") as handle:
            handle.writelines(f"{what} {row.tobytes().hex()}\\n" for row in np.asarray(x, dtype=np.int8))


def build_model():
    return Spy()
'''
FOREST = '''
from sklearn.ensemble import RandomForestClassifier


def build_model():
    return RandomForestClassifier(n_estimators=40, n_jobs=1, random_state=0)
'''


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task("digits")


@pytest.fixture(scope="module")
def seed_outcomes(task: Task, tmp_path_factory: pytest.TempPathFactory) -> dict[str, EvalOutcome]:
    scratch = tmp_path_factory.mktemp("scratch")
    return {level: run(task, task.initial_code, scratch, level=level) for level in ("pilot", "full", "final")}


def run(task: Task, code: str, scratch: Path, **kwargs: object) -> EvalOutcome:
    outcome = asyncio.run(evaluate_program(task, code, scratch_root=scratch, **kwargs))
    assert outcome.ok, outcome.error
    return outcome


def with_block(task: Task, block: str) -> str:
    return split_program(task.initial_code).join(block)


def test_digits_loads_with_pilot_full_and_final(task: Task) -> None:
    assert task.levels == (EvalLevel("pilot", 0.1), EvalLevel("full", None), EvalLevel("final", None))
    assert task.search_level == "pilot" and task.has_final
    assert (task.objective, task.direction) == ("accuracy", "maximize")
    assert task.constraints.required_names == ("build_model",)


def test_the_seed_scores_sensibly_at_every_stage(seed_outcomes: dict[str, EvalOutcome]) -> None:
    pilot, full, final = seed_outcomes["pilot"], seed_outcomes["full"], seed_outcomes["final"]
    assert 0.8 < pilot.score < full.score  # fitted on a tenth of the data
    assert 0.95 < full.score < 0.99 and 0.95 < final.score < 0.99
    for level, outcome in seed_outcomes.items():
        assert outcome.metrics["combined_score"] == outcome.score
        assert outcome.artifacts["level"] == level
    assert pilot.metrics["train_size"] == 126 and full.metrics["train_size"] == final.metrics["train_size"]
    assert (pilot.metrics["fits"], full.metrics["fits"], final.metrics["fits"]) == (1, 50, 1)


def test_params_change_the_score(task: Task, seed_outcomes: dict[str, EvalOutcome], tmp_path: Path) -> None:
    weak = run(task, task.initial_code, tmp_path, level="pilot", params={"C": 0.001})
    assert weak.score < seed_outcomes["pilot"].score - 0.02


@pytest.mark.slow
def test_the_pilot_costs_less_cpu_than_full(task: Task, tmp_path: Path) -> None:
    code = with_block(task, FOREST)
    pilot = run(task, code, tmp_path, level="pilot")
    full = run(task, code, tmp_path, level="full")
    assert pilot.cpu_s is not None and full.cpu_s is not None
    # enough model work that the fixed cost of an evaluation (~1.1 CPU-s of process start and
    # imports, which a loaded VM can double) cannot hide the difference: 1 fit on 10% vs 50 fits
    assert pilot.cpu_s < full.cpu_s / 1.5, (pilot.cpu_s, full.cpu_s)


@pytest.mark.slow
def test_final_scores_images_that_pilot_and_full_never_see(task: Task, tmp_path: Path) -> None:
    code = with_block(task, SPY)
    seen: dict[str, dict[str, set[str]]] = {}
    for level in ("pilot", "full", "final"):
        log = tmp_path / f"{level}.log"
        run(task, code, tmp_path, level=level, params={"log": str(log)},  # the spy writes outside its
            limits=SandboxLimits(timeout_s=task.timeout_s, isolate=False))  # dir: isolation would stop it
        rows: dict[str, set[str]] = {"fit": set(), "predict": set()}
        for line in log.read_text(encoding="utf-8").splitlines():
            what, image = line.split(" ")
            rows[what].add(image)
        seen[level] = rows
    training = seen["full"]["fit"] | seen["full"]["predict"]
    assert len(training) == 1257 and seen["full"]["fit"] == seen["full"]["predict"]  # every image validated
    assert seen["pilot"]["fit"] | seen["pilot"]["predict"] <= training
    assert seen["final"]["fit"] == training
    assert len(seen["final"]["predict"]) == 540 and not seen["final"]["predict"] & training


def test_a_broken_program_fails_cleanly(task: Task, tmp_path: Path) -> None:
    outcome = asyncio.run(evaluate_program(task, with_block(task, "def build_model():\n    return 3\n"),
                                           level="pilot", scratch_root=tmp_path))
    assert not outcome.ok and "lacks fit() or predict()" in (outcome.error or "")
    assert json.dumps(outcome.metrics) == "{}"
