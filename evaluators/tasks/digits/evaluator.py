"""Score a digit classifier on scikit-learn's digits data at the pilot, full or final level.

The program defines ``build_model()`` returning a fresh estimator with ``fit(X, y)`` and
``predict(X)``; it is called once per fit. The splits are fixed by ``SEED``: a stratified
``FINAL_SHARE`` of the images is held out for ``final`` and never used by the other levels; the
rest is the training data. ``pilot`` fits once on a stratified ``data_fraction`` of the training
data (``EVOFORGE_DATA_FRACTION``, else ``PILOT_FRACTION``), drawn outside a fixed validation
slice (``PILOT_VALIDATION_SHARE`` of the training data), and scores that slice. ``full`` scores
stratified ``FULL_FOLDS``-fold cross-validation on all the training data, repeated
``FULL_REPEATS`` times with different shuffles. ``final`` fits on all the training data and
scores the held-out images. ``training_data()`` gives the training data (the winner's registered
MLflow model fits on it when loaded). A broken program (no ``build_model``, no ``fit``/``predict``, wrong
prediction shape, an exception) raises.
"""

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "LOKY_MAX_CPU_COUNT"):
    os.environ[_variable] = "1"  # one thread, one process: the CPU seconds counted are the work done

import importlib.util  # noqa: E402 - the thread limits must be set before numpy loads
import sys  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import RepeatedStratifiedKFold, train_test_split  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

SEED = 0
FINAL_SHARE = 0.3
PILOT_FRACTION = 0.1
PILOT_VALIDATION_SHARE = 0.25
FULL_FOLDS = 5
FULL_REPEATS = 10
LEVELS = ("pilot", "full", "final")


def evaluate(program_path, level="full"):
    """Accuracy of the program's model at ``level``, with the training size and number of fits."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r} (levels: {', '.join(LEVELS)})")
    build_model = _load_build_model(program_path)
    x_train, x_final, y_train, y_final = _splits()
    spread = 0.0
    with threadpool_limits(limits=1):
        if level == "pilot":
            accuracy, train_size, fits = _pilot(build_model, x_train, y_train)
        elif level == "full":
            accuracy, spread, train_size, fits = _cross_validate(build_model, x_train, y_train)
        else:
            accuracy = _fit_score(build_model, x_train, y_train, x_final, y_final)
            train_size, fits = len(y_train), 1
    return {
        "accuracy": accuracy,
        "combined_score": accuracy,
        "train_size": train_size,
        "fits": fits,
        "accuracy_se": spread,  # full: standard error of the mean over the folds (0 elsewhere)
        "level": level,
    }


def training_data():
    """The training images and labels (all but the held-out share): what ``final`` fits on, and
    what the winner's registered MLflow model fits on when it is loaded."""
    x_train, _, y_train, _ = _splits()
    return x_train, y_train


def _load_build_model(program_path):
    spec = importlib.util.spec_from_file_location("candidate_program", program_path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {program_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["candidate_program"] = module
    spec.loader.exec_module(module)
    build_model = getattr(module, "build_model", None)
    if not callable(build_model):
        raise ValueError("the program defines no build_model() function")
    return build_model


def _splits():
    """Training and held-out final data, fixed by SEED."""
    x, y = load_digits(return_X_y=True)
    return train_test_split(x, y, test_size=FINAL_SHARE, stratify=y, random_state=SEED)


def _pilot(build_model, x_train, y_train):
    """One fit on a small stratified subsample, scored on a fixed validation slice."""
    x_pool, x_valid, y_pool, y_valid = train_test_split(
        x_train, y_train, test_size=PILOT_VALIDATION_SHARE, stratify=y_train, random_state=SEED
    )
    fraction = float(os.environ.get("EVOFORGE_DATA_FRACTION", PILOT_FRACTION))
    if not 0 < fraction <= 1:
        raise ValueError(f"EVOFORGE_DATA_FRACTION must be in (0, 1], got {fraction}")
    classes = len(np.unique(y_train))
    size = max(round(fraction * len(y_train)), 2 * classes)
    if size < len(y_pool):
        x_pool, _, y_pool, _ = train_test_split(
            x_pool, y_pool, train_size=size, stratify=y_pool, random_state=SEED
        )
    return _fit_score(build_model, x_pool, y_pool, x_valid, y_valid), len(y_pool), 1


def _cross_validate(build_model, x, y):
    """Mean accuracy of repeated stratified K-fold cross-validation."""
    folds = RepeatedStratifiedKFold(n_splits=FULL_FOLDS, n_repeats=FULL_REPEATS, random_state=SEED)
    scores = [_fit_score(build_model, x[fit], y[fit], x[valid], y[valid]) for fit, valid in folds.split(x, y)]
    return float(np.mean(scores)), float(np.std(scores) / np.sqrt(len(scores))), len(y), len(scores)


def _fit_score(build_model, x_fit, y_fit, x_valid, y_valid):
    """Fit a fresh model and return its accuracy on the validation data."""
    model = build_model()
    if not (callable(getattr(model, "fit", None)) and callable(getattr(model, "predict", None))):
        raise TypeError(f"build_model() returned {type(model).__name__}, which lacks fit() or predict()")
    model.fit(x_fit, y_fit)
    predicted = np.asarray(model.predict(x_valid))
    if predicted.shape != y_valid.shape:
        raise ValueError(f"predict() returned shape {predicted.shape}, expected {y_valid.shape}")
    return float(np.mean(predicted == y_valid))
