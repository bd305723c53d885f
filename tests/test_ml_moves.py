"""Structural moves of scikit-learn pipelines: valid programs, valid knob spaces, models that fit."""

from __future__ import annotations

import ast
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from evoforge.infra.evolve_block import split_program
from evoforge.infra.offline.ml_moves import builds_pipeline, ml_move
from evoforge.infra.offline.mutate import mutate_program
from evoforge.stages.tuning.param_space import parse_space

DIGITS = (Path(__file__).parents[1] / "evaluators" / "tasks" / "digits" / "initial_program.py").read_text()

KNOB_PROGRAM = '''def knob(name, default, **_):
    return default


# EVOLVE-BLOCK-START
RATE = knob("rate", 0.3, low=0.01, high=1.0, log=True)
DEPTH = knob("depth", 4, low=1, high=12)
KIND = knob("kind", "a", choices=["a", "b"])
scale = 2.5
workers = dict(n_jobs=1)
total = 0
total += knob("step", 1, low=0, high=5)
total += 3
# EVOLVE-BLOCK-END
'''


def _final_estimator(code: str) -> str:
    """The class name of the pipeline's final estimator (the one inside a bagging wrapper)."""
    tree = ast.parse(split_program(code).block)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    call = next(n for n in calls if n.func.id == "make_pipeline")
    last = call.args[-1]
    if last.func.id == "BaggingClassifier":
        last = next(k.value for k in last.keywords if k.arg == "estimator")
    return last.func.id


def _build_model(code: str):
    namespace: dict[str, object] = {"__name__": "candidate"}
    exec(compile(code, "<candidate>", "exec"), namespace)
    return namespace["build_model"]()


def _chain(code: str, rng: random.Random, moves: int) -> list[str]:
    programs = []
    for _ in range(moves):
        mutation = ml_move(code, rng)
        assert mutation is not None and mutation.description
        code = mutation.code
        programs.append(code)
    return programs


def test_chained_moves_keep_the_program_and_its_knob_space_valid() -> None:
    parent = split_program(DIGITS)
    families: Counter[str] = Counter()
    for code in _chain(DIGITS, random.Random(2024), 60):
        compile(code, "<mutation>", "exec")
        child = split_program(code)
        assert (child.head, child.tail) == (parent.head, parent.tail)
        space = parse_space(code)
        block = ast.parse(child.block)
        assert any(isinstance(n, ast.FunctionDef) and n.name == "build_model" for n in block.body)
        knobs = [s for s in block.body if isinstance(s, ast.Assign) and "knob(" in ast.unparse(s)]
        declared = {s.targets[0].id for s in knobs}
        used = {n.id for n in ast.walk(block) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert declared <= used, f"knobs nothing uses: {declared - used}"
        assert len(declared) == len(space.knobs)
        assert "n_jobs=2" not in code
        _build_model(code)  # every name is imported or declared
        families[_final_estimator(code)] += 1
    assert len(families) >= 4, families


def test_kept_steps_keep_their_knob_declarations() -> None:
    rng = random.Random(5)
    for _ in range(40):
        mutation = ml_move(DIGITS, rng)
        if "LogisticRegression" in mutation.description:
            continue  # the estimator was swapped away
        assert parse_space(mutation.code).names[:2] == ("C", "max_iter"), mutation.description
        assert "LogisticRegression(C=C, max_iter=MAX_ITER)" in mutation.code


def test_polynomial_features_follow_pca_and_feed_one_linear_model() -> None:
    seen = 0
    for code in _chain(DIGITS, random.Random(11), 300):
        block = split_program(code).block
        if "PolynomialFeatures(" in block:
            seen += 1
            assert block.index("PCA(") < block.index("PolynomialFeatures(")
            assert "BaggingClassifier(" not in block
            linear = ("LogisticRegression", "RidgeClassifier", "LinearDiscriminantAnalysis")
            assert _final_estimator(code) in linear
    assert seen


def test_a_program_without_make_pipeline_or_knobs_gets_none_and_draws_nothing() -> None:
    no_pipeline = "# EVOLVE-BLOCK-START\nx = 0.5\n# EVOLVE-BLOCK-END\n"
    no_knob = DIGITS.replace("knob", "dial")
    rng = random.Random(3)
    state = rng.getstate()
    for program in (no_pipeline, no_knob):
        assert not builds_pipeline(program)
        assert ml_move(program, rng) is None
    assert rng.getstate() == state
    assert builds_pipeline(DIGITS)


def test_mutate_program_always_moves_the_pipeline_of_a_knob_program() -> None:
    rng = random.Random(9)
    structural = 0
    for _ in range(200):
        mutation = mutate_program(DIGITS, rng)
        parse_space(mutation.code)
        structural += mutation.description.split()[0] in ("replace", "add", "remove", "wrap", "unwrap")
    assert structural == 200


def test_knob_literals_and_n_jobs_are_never_perturbed() -> None:
    original = {knob.name: knob for knob in parse_space(KNOB_PROGRAM).knobs}
    rng = random.Random(1)
    scaled = 0
    for _ in range(300):
        mutation = mutate_program(KNOB_PROGRAM, rng)
        knobs = parse_space(mutation.code).knobs
        assert len(knobs) == len(original) and all(k.same_spec(original[k.name]) for k in knobs)
        for line in KNOB_PROGRAM.splitlines():
            if "knob(" in line or "n_jobs" in line:
                assert line in mutation.code.splitlines()
        scaled += "scale = 2.5" not in mutation.code
    assert scaled > 0


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("seed", range(8))
def test_a_mutated_pipeline_fits_and_predicts_digits(seed: int) -> None:
    x, y = load_digits(return_X_y=True)
    x, y = x[:300], y[:300]
    code = _chain(DIGITS, random.Random(seed), 3)[-1]
    model = _build_model(code)
    predictions = model.fit(x, y).predict(x)
    assert predictions.shape == y.shape
    assert np.mean(predictions == y) > 0.2, split_program(code).block
