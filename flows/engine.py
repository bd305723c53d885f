"""The stage engine: one worker pool per stage plug-in, one commit coroutine, one fatal path.

The engine knows stages only through the contract in stages/pipeline/stage.py. Items enter at the entry
stage (research): a worker of that stage draws a new item (sample: parent, inspirations) when
the scheduling policy allows, so sampling happens as late as possible. When a worker takes an
item off its stage's queue, the stage's door (`admit`: e.g. the staleness policy) may send it
elsewhere; otherwise the stage runs and its result is applied to the item by the engine, which
routes it on (the stage's `then`, a stage spliced in `after` it, or wherever the result says).
Every trip ends at the commit coroutine, the single writer.

Failure handling: an exception inside one stage run fails that item's node, with the reason,
and the run goes on. Any other exception — in a worker's own loop, the sampler, the commit,
the adaptive controller, or a background task such as the ticker — stops the run promptly
through one fatal path: logged with its traceback, then re-raised by `run()` as `EngineFailure`.
A stop request (Ctrl+C, the wall-clock limit) wakes the engine at once; items still in a stage
are cancelled (persisted proposals are re-queued by the next run).

LLM outages: while every endpoint's circuit is open (infra/llm/circuit.py) the entry stage draws
no new item (the run is paused; calls in flight wait inside the backend, evaluations go on), and
an `LLMOutage` (the server stayed down past `llm.circuit.give_up_s`) fails no node: it takes the
fatal path and `run()` re-raises it as itself, so the CLI says it in one line.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from evoforge.flows.adaptive import AdaptiveController
from evoforge.flows.budget import Budget
from evoforge.flows.policies import AsyncPolicy, Policy
from evoforge.flows.stage_calls import StageCalls
from evoforge.flows.stage_pool import StagePool
from evoforge.infra.llm.circuit import Breakers, LLMOutage
from evoforge.infra.llm.factory import circuits_of
from evoforge.infra.nodes import FAILED, Node
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.pipeline.routes import build_routes
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult
from evoforge.stages.population.candidate import new_candidate
from evoforge.stages.population.history import ROLLBACK
from evoforge.stages.population.item import Item
from evoforge.stages.population.speculation import taint_derived
from evoforge.stages.sample.draw import draw_item
from evoforge.stages.sinks.commit import Committer

log = logging.getLogger("evoforge.engine")

_CHECKPOINT, _FINAL, _RELEASE, _CALL = "checkpoint", "final", "release", "call"


class EngineFailure(RuntimeError):
    """The run stopped on an error outside any single item's work (traceback in run.log)."""


class Engine:
    """Moves items through the stage pools until the budget is spent, a stop is asked, or a
    fatal error occurs."""

    def __init__(self, ctx: StageContext, committer: Committer, budget: Budget, stages: Sequence[Stage],
                 calls: StageCalls, stop: asyncio.Event, policy: Policy | None = None,
                 controller: AdaptiveController | None = None):
        cfg = ctx.config
        self.ctx, self.committer, self.budget, self.calls, self.stop = ctx, committer, budget, calls, stop
        active = [s for s in stages if s.enabled(cfg)]
        if len({s.name for s in active}) != len(active):
            raise ValueError(f"two stages share a name: {[s.name for s in active]}")
        self.pools: dict[str, StagePool] = {s.name: StagePool(s, s.workers(cfg)) for s in active}
        self.routes = build_routes(stages, set(self.pools))
        self.entry = self.pools[active[0].name]
        self.design_path = self._design_path()
        self.design = self.design_path[-1]  # the stage whose output the evaluators wait for
        self.downstream = self.pools.get(self.routes[self.design.name], self.design)
        self.policy = policy or AsyncPolicy(cfg.engine.queue_size or cfg.engine.workers.engineer)
        self.controller = controller
        self.commit_q: asyncio.Queue[tuple[str, Item, Node | None, float] | None] = asyncio.Queue()
        self.in_flight: dict[int, Item] = {}  # every issued, unfinished item, by id()
        self.changed = asyncio.Condition()
        self.fatal: BaseException | None = None
        self.commit_wait_s = 0.0
        self._background: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        ctx.release = self._release
        self.breakers = Breakers(circuits_of(ctx.llm))  # paused: no new item is drawn
        self.breakers.listen(self._wake)

    def _design_path(self) -> list[StagePool]:
        """The pools from the entry up to (not including) the first stage that evaluates."""
        path, name = [], self.entry.name
        while name != COMMIT and name in self.pools and not self.pools[name].stage.evaluates:
            if self.pools[name] in path:
                break
            path.append(self.pools[name])
            name = self.routes[name]
        return path or [self.entry]

    def designing(self) -> int:
        """Items issued and not yet through the design stages (in a stage or waiting for one)."""
        first = self.design_path[0]
        return sum(p.busy + (p.waiting if p is not first else 0) for p in self.design_path)

    # --- what the progress line, status.json and the adaptive controller read -----------------
    def gauges(self) -> dict[str, Any]:
        out: dict[str, Any] = {"in_flight": len(self.in_flight), "commit_queue": self.commit_q.qsize(),
                               "commit_wait_s": round(self.commit_wait_s, 3),
                               "commit_flushes": self.committer.flushes,
                               "commit_rows_written": self.committer.rows_written}
        for pool in self.pools.values():
            out.update(pool.gauges())
        out.update(self.policy.gauges(self))
        out.update(self.breakers.gauges())
        if self.controller is not None:
            out.update(adaptive_decisions=len(self.controller.decisions),
                       adaptive_last=self.controller.decisions[-5:])
        return out

    def stage_names(self) -> list[str]:
        return list(self.pools)

    def workers(self, stage: str) -> int:
        return self.pools[stage].workers

    def bounds(self, stage: str) -> tuple[int, int]:
        bounds = self.pools[stage].bounds
        return bounds.low, bounds.high

    def meter(self, stage: str) -> tuple[int, float]:
        return self.pools[stage].meter()

    def work_waiting(self, stage: str) -> bool:
        pool = self.pools[stage]
        return pool.waiting > 0 or (pool is self.design and self.policy.wants_workers(self))

    def add_worker(self, stage: str) -> None:
        pool = self.pools[stage]
        if pool.retiring:
            pool.retiring -= 1
            return
        task = self._spawn(self._worker(pool), f"{stage}-worker")
        pool.tasks.add(task)
        task.add_done_callback(pool.tasks.discard)

    def remove_worker(self, stage: str) -> None:
        pool = self.pools[stage]
        if pool.workers > max(1, pool.bounds.low):
            pool.retiring += 1
            self._wake()

    # --- the run ---------------------------------------------------------------------------------
    async def run(self, resumed: Sequence[Item] = (),
                  background: Sequence[Callable[[], Awaitable[Any]]] = ()) -> None:
        """Run to the end; raises EngineFailure when a fatal error stopped the run."""
        self._loop = asyncio.get_running_loop()
        for item in resumed:
            self.in_flight[id(item)] = item
            self.send(item, self.routes[self.entry.name], from_stage=None)
        committer = self._spawn(self._commit_loop(), "commit")
        for pool in self.pools.values():
            for _ in range(pool.bounds.initial):
                self.add_worker(pool.name)
        watchers = [self._spawn(self._watch_stop(), "stop-watcher")]
        if self.controller is not None:
            watchers.append(self._spawn(self.controller.run(self), "adaptive-controller"))
        watchers += [self._spawn(make(), getattr(make, "__name__", "background")) for make in background]
        try:
            await self._until(lambda: self.fatal is not None or self.stop.is_set() or self._done())
        finally:
            await self._shutdown(committer, watchers)
        if isinstance(self.fatal, LLMOutage):
            raise self.fatal  # the server stayed down: its own one line, not an engine failure
        if self.fatal is not None:
            raise EngineFailure(f"{type(self.fatal).__name__}: {self.fatal}") from self.fatal

    def _done(self) -> bool:
        """Nothing in flight and nothing more may be issued (budget spent or a limit reached)."""
        return not self.in_flight and self.budget.remaining(0) == 0

    async def _shutdown(self, committer: asyncio.Task, watchers: list[asyncio.Task]) -> None:
        workers = [t for pool in self.pools.values() for t in pool.tasks]
        self.ctx.evaluations.abort_all()
        for task in workers + watchers:
            task.cancel()
        for task, outcome in zip(workers + watchers,
                                 await asyncio.gather(*workers, *watchers, return_exceptions=True),
                                 strict=True):
            if isinstance(outcome, Exception) and self.fatal is None:
                self._fail(task.get_name(), outcome)
        if not committer.done():
            await self.commit_q.put(None)
            await asyncio.wait({committer})

    # --- supervision: every background task reports to one fatal path ---------------------------
    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._background.add(task)
        task.add_done_callback(self._on_task_done)
        return task

    def _on_task_done(self, task: asyncio.Task) -> None:
        self._background.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._fail(task.get_name(), exc)

    def _fail(self, where: str, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc
            log.error("fatal error in %s, stopping the run:\n%s", where,
                      "".join(traceback.format_exception(exc)))
        self._wake()

    def _wake(self) -> None:
        """Notify every waiter, from any synchronous code on the loop."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.create_task(self._notify())

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def _until(self, predicate: Callable[[], bool]) -> None:
        async with self.changed:
            await self.changed.wait_for(predicate)

    async def _watch_stop(self) -> None:
        await self.stop.wait()
        await self._notify()

    # --- items -----------------------------------------------------------------------------------
    def send(self, item: Item, dest: str, from_stage: str | None) -> None:
        """Route `item` to a stage's queue or to the commit (unless the policy holds it)."""
        if from_stage is not None and self.policy.hold(self, from_stage, item, dest):
            return
        while dest != COMMIT and self.pools[dest].stage.skips(item, self.ctx):
            dest = self.routes[dest]  # nothing to do there: straight on
        if dest == COMMIT:
            self._to_commit(_FINAL, item)
        else:
            self.pools[dest].queue.append(item)
        self._wake()

    def _to_commit(self, kind: str, item: Any, snapshot: Node | None = None) -> None:
        self.commit_q.put_nowait((kind, item, snapshot, time.perf_counter()))

    async def in_commit(self, apply: Callable[[], Any]) -> Any:
        """Run `apply` on the commit coroutine, in order with the results queued before it (a
        round job's decision reaching the single writer); returns what it returned."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._to_commit(_CALL, (apply, done))
        return await done

    async def wait_until(self, predicate: Callable[[], bool]) -> bool:
        """Wait until `predicate` holds (checked whenever the engine changes); False when the
        run is stopping first."""
        await self._until(lambda: self._stopping() or predicate())
        return not self._stopping()

    def _release(self, item: Item, snapshot: Node) -> None:
        """Called by the engineer mid-evaluation: the item's node enters the pool now."""
        self._to_commit(_RELEASE, item, snapshot)

    def _stopping(self) -> bool:
        return self.fatal is not None or self.stop.is_set()

    async def _take(self, pool: StagePool) -> Item | None:
        """The next item for a worker of `pool`; None when the worker should retire or stop."""
        def ready() -> bool:
            return (self._stopping() or pool.retiring > 0 or pool.waiting > 0
                    or (pool is self.entry and not self.breakers.paused and self.policy.may_issue(self)))

        await self._until(ready)
        if self._stopping():
            return None
        if pool.retiring > 0:
            pool.retiring -= 1
            return None
        if pool.waiting > 0:
            return pool.queue.popleft()
        item = draw_item(self.ctx)  # sampling: an error here is the engine's, hence fatal
        self.policy.on_issued(self)
        self.in_flight[id(item)] = item
        return item

    async def _worker(self, pool: StagePool) -> None:
        while (item := await self._take(pool)) is not None:
            admission = pool.stage.admit(item, self.ctx)
            if admission.node is not None:
                item.apply(admission.node, {})
            if not admission.admitted:
                self.send(item, admission.to, from_stage=None)  # type: ignore[arg-type]
                continue
            pool.busy += 1
            start = time.perf_counter()
            try:
                result = await self._guarded(pool.stage, item)
            finally:
                pool.busy -= 1
                pool.busy_s += time.perf_counter() - start
                pool.finished += 1
            item.apply(result.node, result.updates)
            dest = result.to or self.routes[pool.name]
            if pool.stage.checkpoint and dest != COMMIT:
                self._to_commit(_CHECKPOINT, item)
            self.send(item, dest, from_stage=pool.name)

    async def _guarded(self, stage: Stage, item: Item) -> StageResult:
        """Run one stage on one item; an error there fails that node (recorded), not the run."""
        try:
            return await self.calls.run(stage, item)
        except LLMOutage:
            raise  # the LLM server is down for good: the run stops, no node is failed for it
        except Exception as exc:  # noqa: BLE001 - recorded on the node and in run.log
            log.error("internal error in the %s stage on %s:\n%s", stage.name, item.label,
                      traceback.format_exc())
            node = item.node.copy() if item.node is not None else new_candidate(item, self.ctx)
            node.status, node.failed_stage = FAILED, stage.name
            node.error = f"internal error in the {stage.name} stage: {type(exc).__name__}: {exc}"
            return StageResult(node, to=COMMIT)

    # --- the single writer -----------------------------------------------------------------------
    async def _commit_loop(self) -> None:
        """Apply results in arrival order; write them in groups (size or age, see Committer)."""
        while True:
            due = self.committer.flush_due()
            if due == 0:
                self.committer.flush()
                continue
            try:
                entry = await asyncio.wait_for(self.commit_q.get(), timeout=due)
            except TimeoutError:
                self.committer.flush()
                continue
            if entry is None:
                break
            await self._apply(*entry)
        self.committer.flush()

    async def _apply(self, kind: str, item: Any, snapshot: Node | None, queued_at: float) -> None:
        self.commit_wait_s += time.perf_counter() - queued_at
        if kind == _CALL:
            apply, done = item  # applied even when its caller was cancelled (the run stopping)
            try:
                result = apply()
            except Exception as exc:
                if done.cancelled():
                    raise  # nobody awaits it any more: the commit's own failure, hence fatal
                done.set_exception(exc)  # the caller's await raises it (and fails the run)
            else:
                if not done.cancelled():
                    done.set_result(result)
            await self._notify()
            return
        if kind == _CHECKPOINT:
            self.committer.record_proposal(item)
            return
        if kind == _RELEASE:
            assert snapshot is not None
            await self.calls.event("speculative-release", item,
                                   lambda it: self.committer.record_speculative(it, snapshot))
            return
        settling = item.node is not None and item.node.speculative_at is not None
        event = await self.calls.event("settle-speculation" if settling else None, item,
                                       self.committer.record_result)
        slow = self.committer.slow_writes(item)
        if slow is not None:  # in arrival order, but off the event loop
            slow.done(await asyncio.to_thread(slow.work))
        if event == ROLLBACK:
            assert item.node is not None
            marked = taint_derived(self.in_flight.values(), item.node.id, self.committer.lineage)
            log.info("rolled back %s; %d in-flight items derived from it marked stale",
                     item.node.id, len(marked))
        self.in_flight.pop(id(item), None)
        self.policy.on_finished(self, item)
        await self._notify()
