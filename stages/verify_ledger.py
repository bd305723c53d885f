"""Which claims the verify stage checks: the most of the run's evaluations it may spend
(`analyze.verify_share` × the candidate evaluations so far), the claims with the largest credited
effect first. Example::

    >>> ledger = Ledger(share=0.25)
    >>> for _ in range(4): ledger.count_candidate()
    >>> ledger.admit(0.3, cost=2)        # allowance 1: too dear
    False
    >>> for _ in range(4): ledger.count_candidate()
    >>> ledger.admit(0.01, cost=2), ledger.admit(0.5, cost=2)   # small effect, then a large one
    (False, True)
    >>> ledger.settle(reserved=2, spent=3); ledger.spent
    3
    >>> Ledger(share=1.0, candidates=9).admit(1.0, cost=2, fits=False)   # no room in the run's budget
    False
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Ledger:
    """The verify stage's running account: candidate evaluations seen, counterfactual evaluations
    spent or reserved, and the normalised |credited effect| of every claim seen."""

    share: float
    candidates: int = 0
    spent: int = 0
    effects: list[float] = field(default_factory=list)

    @property
    def allowance(self) -> float:
        """The most the counterfactual runs may have spent by now."""
        return self.share * self.candidates

    def count_candidate(self) -> None:
        """One more evaluated candidate of the run."""
        self.candidates += 1

    def admit(self, effect: float, cost: int, fits: bool = True) -> bool:
        """Whether to check a claim crediting `effect` (normalised by the score scale) at `cost`
        evaluations: when it is at or above the (1 − share)-quantile of the effects seen and fits
        the allowance, or when, after it, the spend would still be below the allowance by more
        than one claim's cost (spare budget), and `fits` (the run's budget has room for its worst
        case); an admitted claim's cost is reserved."""
        self.effects.append(abs(effect))
        if not fits:
            return False
        room = self.allowance - self.spent
        ok = room - cost > cost or (room >= cost and abs(effect) >= quantile(self.effects, 1 - self.share))
        if ok:
            self.spent += cost
        return ok

    def settle(self, reserved: int, spent: int) -> None:
        """A checked claim spent `spent` evaluations where `reserved` were held."""
        self.spent += spent - reserved


def quantile(values: list[float], q: float) -> float:
    """The `q`-quantile of `values` (the upper of the two around it).

    >>> quantile([3.0, 1.0, 2.0, 4.0], 0.5), quantile([5.0], 0.9)
    (3.0, 5.0)
    """
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * (len(ordered) - 1)))]
