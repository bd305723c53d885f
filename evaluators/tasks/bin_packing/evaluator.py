"""Score an online bin-packing heuristic on 40 instances: fewer bins than others is better.

The program defines ``priority(item, bins) -> scores``. For each instance the evaluator packs the
items in arrival order itself: ``bins`` holds the remaining capacity of every open bin that has
room for the item, the item goes into the bin with the highest score (ties: the oldest bin), and a
new bin is opened when no open bin has room -- so no item can ever be put into a full bin. Scores
must be numeric, finite and of shape ``bins.shape``, else ``ValueError`` names the item. A case's
score is ``lower_bound / bins_used`` (1.0 is optimal), where ``lower_bound = ceil(sum / capacity)``.

Instances are drawn from a seeded generator keyed by the case id: even ids hold 2500-5000 items of
uniform integer size in [20, 100] with capacity 150 (OR-Library style), odd ids the same count of
Weibull(3, 45) sizes clipped to [1, 100] with capacity 100 (as in FunSearch). ``evaluate`` is the
mean over all cases, so the task also works as a plain OpenEvolve-style evaluator.
"""

import hashlib
import importlib.util
import math
import os
import sys

import numpy as np

N_CASES = 40
MIN_ITEMS, MAX_ITEMS = 2500, 5000
SEED = 20231214  # FunSearch's publication date; changing it changes every instance
_programs = {}


def cases():
    """The instance ids, in a fixed order."""
    return list(range(N_CASES))


def instance(case):
    """The item sizes and bin capacity of instance ``case`` (the same id gives the same items)."""
    case = int(case)
    if not 0 <= case < N_CASES:
        raise ValueError(f"no instance {case}: ids run from 0 to {N_CASES - 1}")
    rng = np.random.default_rng([SEED, case])
    count = int(rng.integers(MIN_ITEMS, MAX_ITEMS + 1))
    if case % 2 == 0:
        return rng.integers(20, 101, count).astype(float), 150.0
    return np.clip(np.round(45.0 * rng.weibull(3.0, count)), 1.0, 100.0), 100.0


def _load_program(program_path):
    """The program's module, imported once per file content (cases reuse it)."""
    with open(program_path, "rb") as handle:
        key = (os.path.abspath(program_path), hashlib.sha256(handle.read()).hexdigest())
    if key not in _programs:
        name = f"candidate_program_{len(_programs)}"
        spec = importlib.util.spec_from_file_location(name, program_path)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot import {program_path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        if not callable(getattr(module, "priority", None)):
            raise ValueError("the program defines no priority(item, bins) function")
        _programs[key] = module
    return _programs[key]


def pack(priority, items, capacity):
    """Pack ``items`` online with ``priority``; return the number of bins used."""
    remaining = np.empty(len(items))
    used = 0
    for index, item in enumerate(items):
        fits = np.flatnonzero(remaining[:used] >= item)
        if fits.size == 0:
            remaining[used] = capacity - item
            used += 1
            continue
        raw = priority(float(item), remaining[fits])
        try:
            scores = np.asarray(raw, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(
                f"priority() returned a non-numeric {type(raw).__name__} for item {index}"
            ) from None
        if scores.shape != fits.shape:
            raise ValueError(
                f"priority() returned shape {scores.shape} for item {index} with {fits.size} "
                f"open bins that fit, expected ({fits.size},)"
            )
        if not np.isfinite(scores).all():
            raise ValueError(
                f"priority() returned NaN or infinite scores for item {index} (size {item:g})"
            )
        remaining[fits[np.argmax(scores)]] -= item
    return used


def evaluate_case(program_path, case):
    """Pack instance ``case`` with the program's priority() and score the bins it used."""
    items, capacity = instance(case)
    used = pack(_load_program(program_path).priority, items, capacity)
    lower_bound = math.ceil(float(items.sum()) / capacity)
    return {"combined_score": lower_bound / used, "bins": float(used), "lower_bound": float(lower_bound)}


def evaluate(program_path):
    """The mean of every case metric over all instances."""
    rows = [evaluate_case(program_path, case) for case in cases()]
    return {key: sum(row[key] for row in rows) / len(rows) for key in rows[0]}
