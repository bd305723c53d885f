"""The verdict on one causal claim, from the scores with the credited hunk and without it.

`effect` is mean(with) − mean(without), signed so that a positive effect is the claimed direction
(a claimed improvement of a minimized objective is a fall of the score). A deterministic evaluator
gives one run a side: the claim is confirmed when the effect is in the claimed direction and not
zero, refuted otherwise. A noisy one gives several: confirmed when the effect is at least two
standard errors and at least a quarter of the claimed magnitude (a claim of a large effect is not
borne out by a tiny one, however certain), refuted when even effect + 2·se falls short of that
quarter (clearly less than claimed, or the wrong way), inconclusive in between. Example::

    >>> judge([1.0], [0.5], better=True, maximize=True, magnitude=0.5).verdict
    'confirmed'
    >>> judge([1.0], [1.0], better=True, maximize=True, magnitude=0.5).verdict
    'refuted'
    >>> judge([1.0, 1.1, 0.9], [0.0, 0.1, -0.1], better=True, maximize=True, magnitude=1.0,
    ...       noisy=True).verdict
    'confirmed'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean, variance

from evoforge.cognition.entries import CONFIRMED, INCONCLUSIVE, REFUTED

_TINY = 1e-9  # relative to the scores' scale: a smaller effect is no effect


@dataclass(frozen=True)
class Judgement:
    """A claim's verdict and its evidence: the signed effect, its standard error, runs per side."""

    verdict: str
    effect: float
    se: float
    n: int


def standard_error(with_hunk: Sequence[float], without: Sequence[float]) -> float:
    """The standard error of the difference of the two sides' means (0 for single runs).

    >>> round(standard_error([1.0, 3.0], [0.0, 2.0]), 6)
    1.414214
    """
    parts = [variance(side) / len(side) for side in (with_hunk, without) if len(side) > 1]
    return math.sqrt(sum(parts)) if parts else 0.0


def judge(with_hunk: Sequence[float], without: Sequence[float], *, better: bool, maximize: bool,
          magnitude: float | None, noisy: bool = False) -> Judgement:
    """The verdict on a claim that the hunk made the score `better` (else worse) by `magnitude`.

    >>> judge([1.0, 1.02, 0.98], [1.0, 0.99, 1.01], better=True, maximize=True, magnitude=0.5,
    ...       noisy=True).verdict
    'refuted'
    >>> judge([1.0, 1.3, 0.7], [0.9, 0.6, 1.2], better=True, maximize=True, magnitude=0.1,
    ...       noisy=True).verdict
    'inconclusive'
    >>> judge([2.0], [3.0], better=True, maximize=False, magnitude=None).verdict
    'confirmed'
    >>> judge([1.0, 1.001, 0.999], [0.99, 0.991, 0.989], better=True, maximize=True, magnitude=1.0,
    ...       noisy=True).verdict    # certain, but a hundredth of what was claimed
    'refuted'
    """
    if not with_hunk or not without:
        raise ValueError("a verdict needs at least one score on each side")
    sign = (1.0 if maximize else -1.0) * (1.0 if better else -1.0)
    effect = sign * (fmean(with_hunk) - fmean(without))
    scale = max(1.0, *(abs(v) for v in (*with_hunk, *without)))
    tiny = _TINY * scale
    n = min(len(with_hunk), len(without))
    if not noisy:
        return Judgement(CONFIRMED if effect > tiny else REFUTED, effect, 0.0, n)
    se = standard_error(with_hunk, without)
    quarter = max(0.25 * abs(magnitude or 0.0), tiny)
    if effect > tiny and effect >= 2 * se and effect >= quarter:
        return Judgement(CONFIRMED, effect, se, n)
    if effect + 2 * se < quarter:
        return Judgement(REFUTED, effect, se, n)
    return Judgement(INCONCLUSIVE, effect, se, n)


def differs(a: float, b: float) -> bool:
    """True when two runs of the same program differ beyond 1e-9 relative: a noisy evaluator.

    >>> differs(1.0, 1.0 + 1e-12), differs(1.0, 1.001)
    (False, True)
    """
    return abs(a - b) > 1e-9 * max(1.0, abs(a), abs(b))
