"""Validation reordering: cases that stopped discriminating move to the back of the order.

Each evaluated candidate is one round. A case *passes* a round when the candidate did at least as
well on it as the reference (the pool's best node on that case): such a case tells nothing about
whether the candidate beats the pool. After ``window`` passes in a row a case moves to the back,
so the prefix that speculative completion judges is made of cases that still discriminate; one
failure brings it forward again. Example::

    order = CaseOrder(["a", "b", "c"], window=1)
    order.update({"a": 1.0, "b": 0.0}, reference={"a": 0.5, "b": 0.5, "c": 0.5})
    order.order  # ["b", "c", "a"]: "a" passed, "c" was not evaluated
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


class CaseOrder:
    """The validation order: cases that passed `window` rounds in a row move to the back."""

    def __init__(self, cases: Sequence[str], window: int = 3) -> None:
        cases = [str(case) for case in cases]
        if len(set(cases)) != len(cases):
            raise ValueError(f"case ids repeat: {sorted({c for c in cases if cases.count(c) > 1})}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        self.window = window
        self._order = cases
        self._streaks = dict.fromkeys(cases, 0)

    @property
    def order(self) -> list[str]:
        """The cases, front group (still discriminating) first."""
        return list(self._order)

    def streak(self, case: str) -> int:
        """How many rounds in a row ``case`` has passed."""
        return self._streaks[case]

    def update(
        self,
        case_scores: Mapping[str, float],
        reference: Mapping[str, float],
        maximize: bool = True,
    ) -> None:
        """Record one evaluated candidate's case scores against the reference's and reorder.

        A tie passes. Cases without a finite score on both sides keep their streak; case ids
        this order does not know are ignored.
        """
        for case, score in case_scores.items():
            ref = reference.get(case)
            if case not in self._streaks or ref is None or not _finite(score, ref):
                continue
            passed = score >= ref if maximize else score <= ref
            self._streaks[case] = self._streaks[case] + 1 if passed else 0
        front = [c for c in self._order if self._streaks[c] < self.window]
        back = [c for c in self._order if self._streaks[c] >= self.window]
        self._order = front + back

    def state(self) -> dict[str, Any]:
        """A JSON-able snapshot for resume."""
        return {"window": self.window, "order": self.order, "streaks": dict(self._streaks)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> CaseOrder:
        """Rebuild an order saved by ``state()``."""
        made = cls(state["order"], window=state["window"])
        streaks = state.get("streaks", {})
        unknown = set(streaks) - set(made._streaks)
        if unknown:
            raise ValueError(f"streaks name cases that are not in the order: {sorted(unknown)}")
        for case, streak in streaks.items():
            if isinstance(streak, bool) or not isinstance(streak, int) or streak < 0:
                raise ValueError(f"streak of case {case!r} must be a non-negative integer, got {streak!r}")
            made._streaks[case] = streak
        return made


def partial_score(case_scores: Mapping[str, float]) -> float | None:
    """The mean of the case scores so far (the same in any order: ``math.fsum``), or None."""
    return math.fsum(case_scores.values()) / len(case_scores) if case_scores else None


def _finite(*values: float) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in values)
