"""Synchronous ("generational") mode, the peers' way and our baseline: design a whole generation,
wait for every LLM answer, evaluate them all, commit, and only then start the next generation."""

from __future__ import annotations

import asyncio
from typing import Any

from evoforge.flows.budget import Budget
from evoforge.flows.stage_tasks import StageTasks
from evoforge.stages.commit import Committer
from evoforge.stages.context import StageContext
from evoforge.stages.item import Item
from evoforge.stages.sample.draw import draw_item


class SyncEngine:
    """Generations as wide as the research workers (the LLM slots), with a barrier after each."""

    def __init__(self, ctx: StageContext, committer: Committer, budget: Budget, stages: StageTasks,
                 stop: asyncio.Event):
        self.ctx, self.committer, self.budget, self.stages, self.stop = ctx, committer, budget, stages, stop
        self.width = ctx.config.engine.workers.research
        self.eval_slots = asyncio.Semaphore(ctx.config.engine.workers.engineer)
        self.generation = 0
        self.phase = "idle"

    def gauges(self) -> dict[str, Any]:
        return {"generation": self.generation, "phase": self.phase, "in_flight": self.budget.in_flight}

    async def _evaluate(self, item: Item) -> Item:
        async with self.eval_slots:
            return await self.stages.engineer(item)

    async def _finish(self, items: list[Item]) -> None:
        for item in items:
            self.committer.record_result(item)
            self.budget.in_flight -= 1
        self.committer.flush()

    async def run(self, resumed: list[Item]) -> None:
        work = asyncio.create_task(self._generations(resumed))
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait([work, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in (work, stopper):
            task.cancel()
        await asyncio.gather(work, stopper, return_exceptions=True)
        if work.done() and not work.cancelled() and work.exception():
            raise work.exception()  # type: ignore[misc]

    async def _generations(self, resumed: list[Item]) -> None:
        if resumed:
            self.budget.in_flight += len(resumed)
            self.phase = "evaluate"
            await self._finish(list(await asyncio.gather(*(self._evaluate(i) for i in resumed))))
        while (n := min(self.width, self.budget.remaining())) > 0:
            self.generation += 1
            self.budget.in_flight += n
            items = [draw_item(self.ctx) for _ in range(n)]
            self.phase = "research"
            items = list(await asyncio.gather(*(self.stages.research(i) for i in items)))
            failed = [i for i in items if i.outcome is not None]
            proposed = [i for i in items if i.outcome is None]
            await self._finish(failed)
            for item in proposed:
                self.committer.record_proposal(item)
            self.committer.flush()
            self.phase = "evaluate"
            await self._finish(list(await asyncio.gather(*(self._evaluate(i) for i in proposed))))
            self.phase = "idle"
