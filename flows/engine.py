"""The asynchronous stage engine: research and engineer worker pools joined by queues.

Research workers pull: each samples its own parent when it starts (sampling is cheap and this
keeps staleness low), asks the LLM, and hands the candidate to the engineers through a bounded
queue. A worker starts only while the evaluation queue has room and the research in flight is
below what the evaluators can absorb (flows/demand.py), so candidates are not designed against a
pool that is long gone by the time they are evaluated. One commit coroutine is the single writer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from evoforge.flows.budget import Budget
from evoforge.flows.demand import ResearchDemand
from evoforge.flows.stage_tasks import StageTasks
from evoforge.stages.commit import Committer
from evoforge.stages.context import StageContext
from evoforge.stages.item import Item
from evoforge.stages.sample.draw import draw_item

log = logging.getLogger("evoforge.engine")

_PROPOSAL, _RESULT = "proposal", "result"


class AsyncEngine:
    """Runs items through the stages until the budget is spent or a stop is requested."""

    def __init__(self, ctx: StageContext, committer: Committer, budget: Budget, stages: StageTasks,
                 stop: asyncio.Event):
        cfg = ctx.config.engine
        self.ctx, self.committer, self.budget, self.stages, self.stop = ctx, committer, budget, stages, stop
        self.n_research, self.n_engineer = cfg.workers.research, cfg.workers.engineer
        self.queue_size = cfg.queue_size or self.n_engineer
        self.engineer_q: asyncio.Queue[Item | None] = asyncio.Queue()
        self.commit_q: asyncio.Queue[tuple[str, Item] | None] = asyncio.Queue()
        self.changed = asyncio.Condition()
        self.busy = {"research": 0, "engineer": 0}
        self.waiting = 0  # researched candidates not yet taken by an engineer
        self.demand = ResearchDemand.create(self.n_research, self.n_engineer)

    def gauges(self) -> dict[str, Any]:
        """Queue depths and busy workers, for the progress line and status.json."""
        return {
            "research_busy": self.busy["research"],
            "engineer_busy": self.busy["engineer"],
            "research_target": self.demand.target(),
            "engineer_queue": self.waiting,
            "commit_queue": self.commit_q.qsize(),
            "in_flight": self.budget.in_flight,
        }

    async def run(self, resumed: list[Item]) -> None:
        backlog = list(resumed)
        self.budget.in_flight += len(backlog)
        researchers = [asyncio.create_task(self._research_worker()) for _ in range(self.n_research)]
        engineers = [asyncio.create_task(self._engineer_worker(backlog)) for _ in range(self.n_engineer)]
        committer = asyncio.create_task(self._commit_loop())
        stopper = asyncio.create_task(self.stop.wait())
        workers = researchers + engineers
        try:
            await asyncio.wait([asyncio.gather(*researchers), stopper],
                               return_when=asyncio.FIRST_COMPLETED)
            if not self.stop.is_set():
                for _ in engineers:
                    await self.engineer_q.put(None)
                await asyncio.wait([asyncio.gather(*engineers), stopper],
                                   return_when=asyncio.FIRST_COMPLETED)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            stopper.cancel()
            await self.commit_q.put(None)
            await committer

    def _room(self) -> bool:
        return self.waiting < self.queue_size and self.busy["research"] < self.demand.target()

    async def _wait_for_budget(self) -> bool:
        """Wait until one more item may be issued and is wanted; False when the run is done."""
        async with self.changed:
            await self.changed.wait_for(
                lambda: self.stop.is_set() or self.budget.stop_reason() is not None
                or (self.budget.can_issue() and self._room())
            )
        return not self.stop.is_set() and self.budget.stop_reason() is None

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def _research_worker(self) -> None:
        while await self._wait_for_budget():
            self.budget.in_flight += 1
            item = draw_item(self.ctx)
            self.busy["research"] += 1
            try:
                item = await self.stages.research(item)
            finally:
                self.busy["research"] -= 1
            if item.outcome is not None:
                await self.commit_q.put((_RESULT, item))
                continue
            self.demand.llm_s.add(item.node.llm_s if item.node else 0.0)
            await self.commit_q.put((_PROPOSAL, item))
            self.waiting += 1
            await self.engineer_q.put(item)

    async def _engineer_worker(self, backlog: list[Item]) -> None:
        while True:
            if backlog:
                item = backlog.pop(0)
            else:
                item = await self.engineer_q.get()
                if item is None:
                    return
                self.waiting -= 1
                await self._notify()
            self.busy["engineer"] += 1
            try:
                item = await self.stages.engineer(item)
            finally:
                self.busy["engineer"] -= 1
            await self.commit_q.put((_RESULT, item))

    async def _commit_loop(self) -> None:
        while True:
            entry = await self.commit_q.get()
            if entry is None:
                return
            kind, item = entry
            if kind == _PROPOSAL:
                self.committer.record_proposal(item)
                continue
            self.committer.record_result(item)
            self.budget.in_flight -= 1
            if item.node is not None and item.node.was_evaluated:
                self.demand.eval_s.add(item.node.eval_s)
            await self._notify()
