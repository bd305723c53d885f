"""Evaluations a stage spends beyond the candidates' own (the verify stage's counterfactual runs),
held against the run's `budget.max_evals` from the moment a stage commits to them, not when the
node that carries them is counted: the engine would otherwise issue candidates into budget a
stage has already promised. The engine connects `room` (what the budget has neither spent nor
committed to items in flight); its budget counts `committed`. Example::

    >>> extra = ExtraEvaluations()
    >>> extra.connect(lambda: 5)
    >>> extra.hold(4) if extra.room() >= 4 else None
    >>> extra.settle(held=4, spent=2); extra.committed
    2
"""

from __future__ import annotations

from collections.abc import Callable


class ExtraEvaluations:
    """The session's extra evaluations: held (a stage's worst case, until it settles) or spent."""

    def __init__(self) -> None:
        self.committed = 0  # held or spent this session; never released (the budget compares it
        # with the extra evaluations its counted nodes carry and takes the larger)
        self._room: Callable[[], int] | None = None

    def connect(self, room: Callable[[], int]) -> None:
        """Make `room` (the engine's budget) what `room()` answers."""
        if self._room is not None:
            raise RuntimeError("the extra evaluations are connected to an engine already")
        self._room = room

    def room(self) -> int:
        """Evaluations the budget may still give (unlimited with no engine: a stage run alone)."""
        return self._room() if self._room is not None else 1 << 30

    def hold(self, n: int) -> None:
        """Commit to at most `n` evaluations (counted against the budget at once)."""
        self.committed += n

    def settle(self, held: int, spent: int) -> None:
        """`spent` evaluations were run where `held` were held."""
        self.committed += spent - held
