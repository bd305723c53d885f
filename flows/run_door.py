"""The engine's door for what reaches the head beside a stage's commit: a speculative release
(the engineer, through the run's release channel) and the round jobs' decisions (a new plan, a
promotion round's full scores). Each is applied by the head on the flow's event loop, then the
engine is woken, as after a stage's result. The round jobs and the release channel are given this
door, never the head itself (the flow alone keeps the head, for the seed and the final report)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evoforge.flows.head import Head
from evoforge.flows.run_state import RunState
from evoforge.infra.nodes import Node
from evoforge.stages.population.item import Item
from evoforge.stages.rounds.branches import Plan
from evoforge.stages.rounds.promotion import PromotionSummary


class RunDoor:
    """The head, as the engine lets work done outside its stage pools reach it (the round jobs'
    `RunHead`, stages/rounds/schedule.py)."""

    def __init__(self, head: Head, wake: Callable[[], None]) -> None:
        self._head, self._wake = head, wake
        self.applied: dict[str, int] = {"released": 0, "plan": 0, "promotion": 0}  # what came in

    @property
    def state(self) -> RunState:
        """The run state, to read (the round jobs read its counters, nodes and rounds)."""
        return self._head.state

    def released(self, item: Item, snapshot: Node) -> None:
        """The item's node enters the pool now, on its validation-prefix score."""
        self._head.released(item, snapshot)
        self._through("released")

    def plan(self, plan: Plan, text: str, calls: Sequence[Any] = (),
             cost: tuple[float, int, int] = (0.0, 0, 0)) -> None:
        """A new plan version (the plan agent's)."""
        self._head.plan(plan, text, calls, cost)
        self._through("plan")

    def promotion(self, summary: PromotionSummary) -> None:
        """A promotion round's full scores onto its nodes."""
        self._head.promotion(summary)
        self._through("promotion")

    def _through(self, what: str) -> None:
        self.applied[what] += 1
        self._wake()
