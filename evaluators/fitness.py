"""A candidate's score from its evaluator's metrics: the objective, else OpenEvolve's fitness rule.

The score is the task's objective metric when the evaluator reports it. An OpenEvolve task (one
whose ``task.yaml`` names no ``objective.metric``) that reports no ``combined_score`` is scored
the way OpenEvolve 0.4.0 scores it (``get_fitness_score``): the mean of the numeric metrics, the
MAP-Elites feature dimensions left out, booleans (flags such as ``timeout``) and NaN values
skipped; when only feature dimensions are numeric, the mean of those. An ``error`` entry
(OpenEvolve's way of reporting a failed candidate) does not fail a candidate that has a score:
it is kept as an artifact and the candidate is recorded with its score, as OpenEvolve records
it. Without a score, the error (or the missing metric) is the reason the candidate failed, where
OpenEvolve would give it 0.0. Example::

    score = objective_score(task, {"mae": 0.5, "corr": 1.5, "complexity": 9.0}, {}, flags=())
    score.value, score.rule  # (1.0, "mean of 2 numeric metrics (corr, mae) ...") for a
                             # task without a declared objective; complexity is a feature
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from evoforge.evaluators.task import Task

OPENEVOLVE_SCORE = "combined_score"
ERROR_KEY = "error"


@dataclass(frozen=True)
class Score:
    """A candidate's score and how it was derived, or the reason it has none."""

    value: float | None
    rule: str | None = None  # set when the score is not the objective metric itself
    failure: str | None = None


def objective_score(
    task: Task,
    metrics: dict[str, float],
    artifacts: dict[str, str],
    flags: Collection[str] = (),
    source: str = "evaluator result",
) -> Score:
    """The score of a result whose numeric ``metrics`` (``flags``: those that were booleans) and
    text ``artifacts`` the evaluator returned; see the module doc for the rule."""
    if task.objective in metrics:
        value = metrics[task.objective]
        if not math.isfinite(value):
            return Score(None, failure=f"metric '{task.objective}' is not finite ({value})")
        return Score(value)
    if not task.objective_declared:
        value, used = openevolve_fitness(metrics, flags, task.feature_dimensions)
        if used:
            if not math.isfinite(value):
                return Score(None, failure=f"the mean of the metrics is not finite ({value})")
            names = ", ".join(sorted(used))
            return Score(value, rule=f"mean of {len(used)} numeric metrics ({names}): the result has "
                                     f"no '{OPENEVOLVE_SCORE}' (OpenEvolve's rule)")
    reported = reported_error(artifacts)
    if reported:
        return Score(None, failure=f"evaluator reported error: {reported}")
    present = ", ".join(sorted(metrics)) or "none"
    return Score(None, failure=f"metric '{task.objective}' missing from {source}; "
                               f"numeric metrics present: {present}")


def openevolve_fitness(
    metrics: dict[str, float], flags: Collection[str], feature_dimensions: Collection[str]
) -> tuple[float, tuple[str, ...]]:
    """OpenEvolve's fitness without ``combined_score``, and the metrics it averaged (none: 0.0)."""
    numeric = {k: v for k, v in metrics.items() if k not in flags and not math.isnan(v)}
    used = tuple(k for k in numeric if k not in feature_dimensions) or tuple(numeric)
    if not used:
        return 0.0, ()
    return sum(numeric[k] for k in used) / len(used), used


def reported_error(artifacts: dict[str, str]) -> str:
    """The evaluator's own ``error`` entry, on one line (empty when it reported none)."""
    return " ".join(artifacts.get(ERROR_KEY, "").split())[:1000]
