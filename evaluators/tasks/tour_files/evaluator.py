"""Score a two-file travelling-salesman heuristic: build_tour() in tour.py, improve() in improve.py.

``evaluate(program_path)`` takes the candidate's copy of the project folder (a file inside it is
taken to mean its folder) and imports tour.py and improve.py from there, with that folder first on
``sys.path`` so they can import each other and helpers.py by plain name. On each of the fixed,
seeded instances (40-80 random cities in the unit square) it runs ``build_tour(points)`` and then
``improve(points, tour)``. Both must return a permutation of the city indices; otherwise the
result is ``combined_score`` 0.0 with an ``error`` naming the instance, the step and the fault.
A tour's score is ``identity length / tour length`` (the identity tour visits the cities in index
order, so higher is better); ``combined_score`` is the mean over the instances.
"""

import importlib
import math
import os
import random
import sys

SEED = 7
SIZES = (40, 48, 56, 64, 72, 80)
_MODULES = ("tour", "improve", "helpers")


def instances() -> list[list[tuple[float, float]]]:
    """The fixed instances: lists of (x, y) cities drawn uniformly from the unit square."""
    rng = random.Random(SEED)
    return [[(rng.random(), rng.random()) for _ in range(n)] for n in SIZES]


def length(points: list[tuple[float, float]], tour: list[int]) -> float:
    """The length of the closed tour (computed here, not with the candidate's helpers)."""
    return sum(math.dist(points[tour[k - 1]], points[tour[k]]) for k in range(len(tour)))


def check_tour(tour: object, n: int) -> str | None:
    """Why ``tour`` is not a permutation of range(n), or None when it is."""
    if not isinstance(tour, list | tuple):
        return f"returned {type(tour).__name__}, expected a list of city indices"
    bad = [c for c in tour if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c < n]
    if bad:
        return f"returned {bad[0]!r}, which is not a city index in 0..{n - 1}"
    missing = sorted(set(range(n)) - set(tour))
    if missing:
        return f"returned a tour missing city {missing[0]} ({len(missing)} of {n} cities missing)"
    if len(tour) != n:
        return f"returned {len(tour)} cities for {n} points (a city is visited twice)"
    return None


def load_project(folder: str) -> tuple[object, object]:
    """The ``tour`` and ``improve`` modules of ``folder``, freshly imported from its files."""
    for name in _MODULES:
        sys.modules.pop(name, None)
    sys.path.insert(0, folder)
    writes = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # leave no __pycache__ in the candidate's folder
    try:
        importlib.invalidate_caches()
        return importlib.import_module("tour"), importlib.import_module("improve")
    finally:
        sys.dont_write_bytecode = writes
        sys.path.remove(folder)


def evaluate(program_path: str) -> dict:
    """Run both steps on every instance; return the mean score and the mean tour length."""
    folder = os.path.abspath(program_path)
    if not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    try:
        tour_module, improve_module = load_project(folder)
        ratios, lengths, built = [], [], []
        for index, points in enumerate(instances()):
            tour = tour_module.build_tour(list(points))
            fault = check_tour(tour, len(points))
            if fault is None:
                built.append(length(points, tour))
                tour = improve_module.improve(list(points), list(tour))
                fault = check_tour(tour, len(points))
                step = "improve()"
            else:
                step = "build_tour()"
            if fault is not None:
                return {"combined_score": 0.0, "valid_instances": float(index),
                        "error": f"instance {index} ({len(points)} cities): {step} {fault}"}
            lengths.append(length(points, tour))
            ratios.append(length(points, list(range(len(points)))) / lengths[-1])
    finally:
        for name in _MODULES:
            sys.modules.pop(name, None)
    return {
        "combined_score": sum(ratios) / len(ratios),
        "mean_length": sum(lengths) / len(lengths),
        "mean_built_length": sum(built) / len(built),
        "valid_instances": float(len(ratios)),
    }
