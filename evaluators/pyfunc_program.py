"""An ML task's winning program as an MLflow pyfunc model, trained when MLflow loads it.

An ML task's program defines ``build_model()`` (a fresh, unfitted estimator with ``fit`` and
``predict``) and its evaluator defines ``training_data()`` returning ``(X, y)``: the data its
``final`` level fits on. The saved model holds the program, the evaluator and the knob values
the winner was scored with (``params.json``); loading it (``mlflow.pyfunc.load_model``) runs the
program with those knobs, fits ``build_model()`` on ``training_data()`` and keeps the fitted
estimator; ``predict`` is the estimator's. Nothing of the candidate runs in the evoforge process:
the program runs where the model is loaded (a place that needs evoforge installed, the model's
code being this module). The model is saved as MLflow's "models from code" (no pickled object).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import mlflow.pyfunc

from evoforge.evaluators.compat import evoforge_knobs
from evoforge.evaluators.evaluator_source import evaluator_functions, top_level_statements
from evoforge.evaluators.task import Task
from evoforge.infra.pyast import parse_program

TRAINING_DATA = "training_data"  # the evaluator's function giving (X, y)
BUILD_MODEL = "build_model"  # the program's function giving a fresh estimator
_MODEL_CODE = ("from mlflow.models import set_model\n\n"
               "from evoforge.evaluators.pyfunc_program import ProgramModel\n\n"
               "set_model(ProgramModel())\n")
_REQUIREMENTS = ("mlflow", "scikit-learn", "numpy", "evoforge")


def wraps_as_model(task: Task, code: str) -> bool:
    """True when `code` of `task` can become a pyfunc model: a Python program defining
    ``build_model`` whose evaluator defines ``training_data``."""
    if not task.is_python:
        return False
    if TRAINING_DATA not in evaluator_functions(task.evaluator_path, ()):
        return False
    try:
        body = parse_program(code).body
    except SyntaxError:
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == BUILD_MODEL
               for node in top_level_statements(body))


def save_program_model(folder: Path, task: Task, code: str, params: dict[str, Any]) -> Path:
    """Save the pyfunc model of program `code` (with knob values `params`) under `folder`;
    returns the model's folder."""
    files = folder / "sources"
    files.mkdir(parents=True, exist_ok=True)
    (files / "program.py").write_text(code, encoding="utf-8")
    (files / "params.json").write_text(json.dumps(params, sort_keys=True) + "\n", encoding="utf-8")
    (files / "model_code.py").write_text(_MODEL_CODE, encoding="utf-8")
    model = folder / "model"
    mlflow.pyfunc.save_model(
        str(model), python_model=str(files / "model_code.py"),
        artifacts={"program": str(files / "program.py"), "evaluator": str(task.evaluator_path),
                   "params": str(files / "params.json")},
        pip_requirements=[_pinned(name) for name in _REQUIREMENTS], signature=_signature(),
    )
    return model


def fit_program(program: Path, evaluator: Path, params: dict[str, Any]) -> Any:
    """The estimator ``build_model()`` of `program` gives (its knobs set to `params`), fitted on
    ``training_data()`` of `evaluator`."""
    data = _module(evaluator, "evoforge_model_evaluator")
    x, y = getattr(data, TRAINING_DATA)()
    with _knobs(params):
        estimator = getattr(_module(program, "evoforge_model_program"), BUILD_MODEL)()
        estimator.fit(x, y)
    return estimator


class ProgramModel(mlflow.pyfunc.PythonModel):
    """The pyfunc model: fits the program's estimator on load, predicts with it."""

    def load_context(self, context: Any) -> None:
        params = json.loads(Path(context.artifacts["params"]).read_text(encoding="utf-8"))
        self.estimator = fit_program(Path(context.artifacts["program"]), Path(context.artifacts["evaluator"]),
                                     params)

    # model_input has no type hint: MLflow would read one as its input schema (the signature,
    # a float64 matrix of any width, is given when the model is saved)
    def predict(self, context: Any, model_input, params: dict[str, Any] | None = None) -> Any:
        import numpy as np

        return np.asarray(self.estimator.predict(np.asarray(model_input, dtype=float)))


@contextlib.contextmanager
def _knobs(params: dict[str, Any]) -> Iterator[None]:
    """The program's ``evoforge_knobs.knob`` gives `params` (restored afterwards)."""
    saved_module, saved_env = sys.modules.get("evoforge_knobs"), os.environ.get(evoforge_knobs.PARAMS_ENV)
    sys.modules["evoforge_knobs"] = evoforge_knobs
    os.environ[evoforge_knobs.PARAMS_ENV] = json.dumps(params)
    try:
        yield
    finally:
        if saved_module is None:
            sys.modules.pop("evoforge_knobs", None)
        else:
            sys.modules["evoforge_knobs"] = saved_module
        if saved_env is None:
            os.environ.pop(evoforge_knobs.PARAMS_ENV, None)
        else:
            os.environ[evoforge_knobs.PARAMS_ENV] = saved_env


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _signature() -> Any:
    """Rows of float64 features in, one prediction a row out (the width is the task's)."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    return ModelSignature(inputs=Schema([TensorSpec(np.dtype("float64"), (-1, -1))]))


def _pinned(name: str) -> str:
    try:
        return f"{name}=={importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name
