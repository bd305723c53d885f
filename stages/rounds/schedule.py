"""Rounds: every `rounds.size` finished candidates is one round; every K rounds the round jobs
run beside the pipeline — the plan agent (`plan.every`) and the promotion subflow
(`promotion.every`) — and their work reaches the run's head through the engine (`RunHead`: the
engine's door, flows/run_door.py): a new plan directly, a promotion round's candidates as items of
the `promote` stage, which the stage's pool takes to the head like any other stage's results.

A round job is a background task of the engine, so an exception in it takes the run down
through the engine's one fatal path, like any other background task.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from evoforge.stages.population.item import Item
from evoforge.stages.population.stats import RunStats
from evoforge.stages.rounds.branches import Plan

log = logging.getLogger("evoforge.rounds")


class RunHead(Protocol):
    """What the round jobs need of the run's head (the engine's door to it): its state to read,
    the call that applies a plan, and the entry for items a stage's pool takes to the head."""

    state: Any  # flows/run_state.py's RunState: stats, nodes, rounds

    def plan(self, plan: Plan, text: str, calls: Sequence[Any] = (),
             cost: tuple[float, int, int] = (0.0, 0, 0)) -> None: ...

    async def enter(self, items: Sequence[Item], stage: str) -> bool: ...


class Waiter(Protocol):
    """The engine, as a round job waits on it."""

    async def wait_until(self, predicate: Callable[[], bool]) -> bool: ...


@dataclass(frozen=True)
class RoundJob:
    """Something to do every `every` rounds: `run(round)`."""

    name: str
    every: int
    run: Callable[[int], Awaitable[None]]


def round_size(configured: int | None, slots: int) -> int:
    """Candidates per round: as configured, else one per plan slot."""
    return configured or slots


async def run_rounds(engine: Waiter, stats: RunStats, jobs: list[RoundJob], size: int) -> None:
    """Run each job whenever its round comes, until the run stops. Rounds already passed in an
    earlier session of the run are not run again."""
    passed = stats.proposals // size
    log.info("rounds of %d candidates; %d passed before; jobs: %s", size, passed,
             ", ".join(f"{j.name} every {j.every}" for j in jobs))

    def round_passed() -> bool:
        return stats.proposals >= (passed + 1) * size

    while await engine.wait_until(round_passed):
        now = stats.proposals // size  # a slow job may have let several rounds pass: run it once
        for job in jobs:
            if now // job.every > passed // job.every:
                log.info("round %d: %s", now, job.name)
                await job.run(now)
        passed = now
