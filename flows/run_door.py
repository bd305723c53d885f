"""The engine's door for what reaches the head beside the entry stage's draws: a speculative
release (the engineer, through the run's release channel), a new plan (the plan agent's round
job), and items made outside the entry stage (a promotion round's candidates), which the door
puts into a stage's pool so that they go to the head like any other stage's results. A release
or a plan is applied by the head on the flow's event loop, then the engine is woken, as after a
stage's result. The round jobs and the release channel are given this door, never the head itself
(the flow alone keeps the head, for the seed and the final report)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from evoforge.flows.head import Head
from evoforge.flows.run_state import RunState
from evoforge.infra.nodes import Node
from evoforge.infra.process_local import ProcessLocal
from evoforge.stages.population.item import Item
from evoforge.stages.rounds.branches import Plan

Enter = Callable[[Sequence[Item], str], Awaitable[bool]]  # the engine's entry for such items


class RunDoor(ProcessLocal):
    """The head, as the engine lets work done outside its stage pools reach it (the round jobs'
    `RunHead`, stages/rounds/schedule.py)."""

    def __init__(self, head: Head, wake: Callable[[], None], enter: Enter) -> None:
        self._head, self._wake, self._enter = head, wake, enter
        self.applied: dict[str, int] = {"released": 0, "plan": 0, "entered": 0}  # what came in

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

    async def enter(self, items: Sequence[Item], stage: str) -> bool:
        """`items` start their trip at `stage`'s pool (a promotion round's, at `promote`); returns
        once the head has committed them all (False: the run stopped first)."""
        self.applied["entered"] += len(items)
        return await self._enter(items, stage)

    def _through(self, what: str) -> None:
        self.applied[what] += 1
        self._wake()
