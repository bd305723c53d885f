"""The asynchronous stage engine: research, reflect and engineer worker pools joined by queues.

Research workers pull: each samples its own parent when it starts (sampling is cheap and this
keeps staleness low), asks the LLM, and hands the candidate to the engineers through a queue. A
worker starts only while the evaluation queue has room and the research in flight is below what
the evaluators can absorb (flows/demand.py). At the engineer's entry the staleness policy passes,
drops, or sends the item to the reflect pool. One commit coroutine is the single writer; it also
settles speculative nodes and marks the items derived from a rolled-back node.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from evoforge.flows.adaptive import AdaptiveController
from evoforge.flows.budget import Budget
from evoforge.flows.demand import ResearchDemand
from evoforge.flows.stage_tasks import StageTasks
from evoforge.infra.nodes import STALE
from evoforge.stages.commit import Committer
from evoforge.stages.context import StageContext
from evoforge.stages.history import ROLLBACK
from evoforge.stages.item import DROPPED_STALE, Item
from evoforge.stages.sample.draw import draw_item
from evoforge.stages.speculation import taint_derived
from evoforge.stages.staleness import DROP, REFLECT, decide

log = logging.getLogger("evoforge.engine")

_PROPOSAL, _RESULT, _SPECULATIVE = "proposal", "result", "speculative"
_FLUSH_ROWS = 32


class AsyncEngine:
    """Runs items through the stages until the budget is spent or a stop is requested."""

    def __init__(self, ctx: StageContext, committer: Committer, budget: Budget, stages: StageTasks,
                 stop: asyncio.Event):
        cfg = ctx.config
        self.ctx, self.committer, self.budget, self.stages, self.stop = ctx, committer, budget, stages, stop
        self.queue_size = cfg.engine.queue_size or cfg.engine.workers.engineer
        self.engineer_q: asyncio.Queue[Item] = asyncio.Queue()
        self.reflect_q: asyncio.Queue[Item] = asyncio.Queue()
        self.commit_q: asyncio.Queue[tuple[str, Item, float] | None] = asyncio.Queue()
        self.changed = asyncio.Condition()
        self.waiting = 0  # researched candidates queued for an engineer
        self.in_flight: dict[int, Item] = {}  # every issued, unfinished item (for rollback taints)
        self.pools: dict[str, list[asyncio.Task]] = {"research": [], "engineer": [], "reflect": []}
        self.retiring = {"research": 0, "engineer": 0, "reflect": 0}
        self.busy = {"research": 0, "engineer": 0, "reflect": 0}
        self.finished = {"research": 0, "engineer": 0, "reflect": 0}
        self.busy_s = {"research": 0.0, "engineer": 0.0, "reflect": 0.0}
        self.commit_wait_s = 0.0
        self.demand = ResearchDemand.create(cfg.engine.workers.research, cfg.engine.workers.engineer)
        self.reflective = cfg.staleness.policy == "reflective"
        self.controller = AdaptiveController(cfg.adaptive) if cfg.adaptive.enabled else None
        ctx.release = self._release

    # --- what the progress line, status.json and the adaptive controller read -----------------
    def gauges(self) -> dict[str, Any]:
        out = {
            "research_workers": len(self.pools["research"]),
            "engineer_workers": len(self.pools["engineer"]),
            "research_busy": self.busy["research"],
            "engineer_busy": self.busy["engineer"],
            "research_target": self.demand.target(),
            "engineer_queue": self.waiting,
            "commit_queue": self.commit_q.qsize(),
            "commit_wait_s": round(self.commit_wait_s, 3),
            "in_flight": self.budget.in_flight,
        }
        if self.reflective:
            out.update(reflect_workers=len(self.pools["reflect"]), reflect_queue=self.reflect_q.qsize())
        if self.controller is not None:
            out.update(adaptive_decisions=len(self.controller.decisions),
                       adaptive_last=self.controller.decisions[-5:])
        return out

    def stages(self) -> list[str]:
        return ["research", "engineer"] + (["reflect"] if self.reflective else [])

    def workers(self, stage: str) -> int:
        return len(self.pools[stage]) - self.retiring[stage]

    def work_waiting(self, stage: str) -> bool:
        if stage == "engineer":
            return self.waiting > 0
        if stage == "reflect":
            return self.reflect_q.qsize() > 0
        return self.budget.can_issue() and self.waiting < self.queue_size

    def meter(self, stage: str) -> tuple[int, float]:
        return self.finished[stage], self.busy_s[stage]

    def add_worker(self, stage: str) -> None:
        if self.retiring[stage]:
            self.retiring[stage] -= 1
            return
        body = {"research": self._research_worker, "engineer": self._engineer_worker,
                "reflect": self._reflect_worker}[stage]
        task = asyncio.create_task(body())
        self.pools[stage].append(task)
        task.add_done_callback(lambda t, s=stage: self.pools[s].remove(t) if t in self.pools[s] else None)
        if stage == "research":
            self.demand.max_research = self.workers("research")
        elif stage == "engineer":
            self.demand.engineers = self.workers("engineer")

    def remove_worker(self, stage: str) -> None:
        if self.workers(stage) > 1:
            self.retiring[stage] += 1
            if stage == "research":
                self.demand.max_research = self.workers("research")
            elif stage == "engineer":
                self.demand.engineers = self.workers("engineer")

    def _retire(self, stage: str) -> bool:
        if self.retiring[stage] > 0:
            self.retiring[stage] -= 1
            return True
        return False

    # --- the run ---------------------------------------------------------------------------------
    async def run(self, resumed: list[Item]) -> None:
        cfg = self.ctx.config.engine
        for item in resumed:
            self._track(item)
            self._enqueue(item)
        for stage, count in (("research", cfg.workers.research), ("engineer", cfg.workers.engineer),
                             ("reflect", cfg.workers.engineer if self.reflective else 0)):
            for _ in range(count):
                self.add_worker(stage)
        committer = asyncio.create_task(self._commit_loop())
        control = asyncio.create_task(self.controller.run(self)) if self.controller else None
        try:
            async with self.changed:
                await self.changed.wait_for(self._done)
        finally:
            workers = [t for pool in self.pools.values() for t in pool]
            for task in workers + ([control] if control else []):
                task.cancel()
            await asyncio.gather(*workers, *([control] if control else []), return_exceptions=True)
            await self.commit_q.put(None)
            await committer

    def _done(self) -> bool:
        return self.stop.is_set() or (self.budget.stop_reason() is not None and self.budget.in_flight == 0)

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def _room(self) -> bool:
        return self.waiting < self.queue_size and self.busy["research"] < self.demand.target()

    async def _wait_for_budget(self) -> bool:
        """Wait until one more item may be issued and is wanted; False when the run is done."""
        async with self.changed:
            await self.changed.wait_for(
                lambda: self.stop.is_set() or self.budget.stop_reason() is not None
                or self.retiring["research"] > 0 or (self.budget.can_issue() and self._room())
            )
        return not self.stop.is_set() and self.budget.stop_reason() is None

    def _track(self, item: Item) -> None:
        self.budget.in_flight += 1
        self.in_flight[id(item)] = item

    def _enqueue(self, item: Item) -> None:
        self.waiting += 1
        self.engineer_q.put_nowait(item)

    def _commit(self, kind: str, item: Item) -> None:
        self.commit_q.put_nowait((kind, item, time.perf_counter()))

    def _release(self, item: Item) -> None:
        """Called mid-evaluation by the speculation: the item's node enters the pool now."""
        self._commit(_SPECULATIVE, item)

    async def _timed(self, stage: str, call: Callable[[Item], Awaitable[Item]], item: Item) -> Item:
        self.busy[stage] += 1
        start = time.perf_counter()
        try:
            return await call(item)
        finally:
            self.busy[stage] -= 1
            self.busy_s[stage] += time.perf_counter() - start
            self.finished[stage] += 1

    async def _research_worker(self) -> None:
        while await self._wait_for_budget():
            if self._retire("research"):
                return
            item = draw_item(self.ctx)
            self._track(item)
            item = await self._timed("research", self.stages.research, item)
            if item.outcome is not None:
                self._commit(_RESULT, item)
                continue
            self.demand.llm_s.add(item.node.llm_s if item.node else 0.0)
            self._commit(_PROPOSAL, item)
            self._enqueue(item)

    async def _engineer_worker(self) -> None:
        while not self._retire("engineer"):
            item = await self.engineer_q.get()
            self.waiting -= 1
            await self._notify()
            node = item.node
            assert node is not None
            if not item.reflected:
                decision = decide(item, self.ctx.pool.v, self.ctx.history, self.ctx.config.staleness)
                node.staleness, node.reflection = item.staleness(self.ctx.pool.v), decision.reason
                if decision.action == DROP:
                    node.status, item.outcome = STALE, DROPPED_STALE
                    self._commit(_RESULT, item)
                    continue
                if decision.action == REFLECT:
                    self.reflect_q.put_nowait(item)
                    continue
            item = await self._timed("engineer", self.stages.engineer, item)
            self._commit(_RESULT, item)

    async def _reflect_worker(self) -> None:
        while not self._retire("reflect"):
            item = await self.reflect_q.get()
            item = await self._timed("reflect", self.stages.reflect, item)
            if item.outcome is not None:
                self._commit(_RESULT, item)
            else:
                self._enqueue(item)
                await self._notify()

    async def _commit_loop(self) -> None:
        """The single writer; rows are flushed in one transaction whenever the queue runs dry."""
        try:
            while (entry := await self.commit_q.get()) is not None:
                await self._commit_entry(*entry)
                if self.commit_q.empty() or self.committer.pending() >= _FLUSH_ROWS:
                    self.committer.flush()
        finally:
            self.committer.flush()

    async def _commit_entry(self, kind: str, item: Item, queued_at: float) -> None:
        self.commit_wait_s += time.perf_counter() - queued_at
        if kind == _PROPOSAL:
            self.committer.record_proposal(item)
            return
        if kind == _SPECULATIVE:
            await self.stages.event("speculative-release", item, self.committer.record_speculative)
            return
        settling = item.node is not None and item.node.speculative_at is not None
        name = "settle-speculation" if settling else None
        event = await self.stages.event(name, item, self.committer.record_result)
        if event == ROLLBACK:
            self._taint(item)
        self.in_flight.pop(id(item), None)
        self.budget.in_flight -= 1
        if item.node is not None and item.node.was_evaluated:
            self.demand.eval_s.add(item.node.eval_s)
        await self._notify()

    def _taint(self, rolled_back: Item) -> None:
        """Mark every in-flight item derived from a rolled-back node as stale."""
        assert rolled_back.node is not None
        marked = taint_derived(self.in_flight.values(), rolled_back.node.id)
        log.info("rolled back %s; %d in-flight items derived from it marked stale",
                 rolled_back.node.id, len(marked))
