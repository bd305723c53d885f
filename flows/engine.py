"""The stage engine: one worker pool per stage plug-in, the head, one fatal path.

The engine knows stages only through the contract in stages/pipeline/stage.py and their order
through the pipeline (stages/pipeline/pipeline.py). Items enter at the entry stage: a worker of
that stage draws a new item (sample: parent, inspirations) when the scheduling policy allows, so
sampling happens as late as possible; items made elsewhere (a promotion round's candidates) enter
at their stage's pool through the door (`enter`). When a worker takes an item off its stage's queue, the
stage's door (`admit`: e.g. the staleness policy) may send it elsewhere; otherwise the stage runs
and its result is applied to the item, which goes on along its route (the next stage the run
uses, or wherever the result says). A stage that checkpoints hands the head the proposal before
it goes on; every trip ends at the head (`COMMIT`), which applies the result to the run state
and emits the events the sinks record off the event loop. Queues are bounded (flows/stage_pool.py).

Failure handling: an exception inside one stage run fails that item's node, with the reason,
and the run goes on. Any other exception — in a worker's own loop, the sampler, the head, the
adaptive controller, a sink's thread or a background task such as the ticker — stops the run
promptly through one fatal path: logged with its traceback, then re-raised by `run()` as
`EngineFailure`. A stop request (Ctrl+C, the wall-clock limit) wakes the engine at once; items
still in a stage are cancelled (persisted proposals are sent on by the next run from where they
were); one whose outcome is known (failed, on its way to a repair or the analysis) is committed.

LLM outages: while every endpoint's circuit is open (infra/llm/circuit.py) the entry stage draws
no new item (the run is paused; calls in flight wait inside the backend, evaluations go on), and
an `LLMOutage` (the server stayed down past `llm.circuit.give_up_s`) fails no node: it takes the
fatal path and `run()` re-raises it as itself, so the CLI says it in one line.

A full disk (infra/disk_full.py) where the run writes — a sink's store, the run folder from inside
a stage (Optuna's study, the run's scratch) — fails no node either: it takes the fatal path as a
`DiskFull` (what was recorded stays; the rest is done again on resume). A write that fails for a
full disk outside the run folder (a candidate's sandbox directory) is that candidate's failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from evoforge.evaluators.task_model_client import client_of
from evoforge.flows.adaptive import AdaptiveController
from evoforge.flows.budget import Budget
from evoforge.flows.engine_paths import design_path, resume_stage, run_folder_full
from evoforge.flows.head import Head
from evoforge.flows.policies import AsyncPolicy, Policy
from evoforge.flows.run_door import RunDoor
from evoforge.flows.stage_calls import StageCalls
from evoforge.flows.stage_pool import StagePool, link_downstream
from evoforge.infra.disk_full import DiskFull, disk_full_error
from evoforge.infra.failure_reasons import INTERNAL
from evoforge.infra.llm.circuit import Breakers, LLMOutage
from evoforge.infra.llm.factory import circuits_of, follow_research_workers
from evoforge.infra.nodes import FAILED
from evoforge.stages.evaluation.slots import waiting_time
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.draw import draw_item
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult
from evoforge.stages.population.history import ROLLBACK
from evoforge.stages.population.item import Item
from evoforge.stages.population.speculation import taint_derived

log = logging.getLogger("evoforge.engine")


class EngineFailure(RuntimeError):
    """The run stopped on an error outside any single item's work (traceback in run.log)."""


class Engine:
    """Moves items through the stage pools until the budget is spent, a stop is asked, or a
    fatal error occurs."""

    def __init__(self, ctx: RunView, head: Head, budget: Budget, pipeline: Pipeline,
                 calls: StageCalls, stop: asyncio.Event, policy: Policy | None = None,
                 controller: AdaptiveController | None = None):
        cfg = ctx.config
        self.ctx, self.head, self.budget, self.calls, self.stop = ctx, head, budget, calls, stop
        self.pipeline = pipeline
        active = [s for s in pipeline.stages if s.enabled(cfg)]
        self.pools: dict[str, StagePool] = {s.name: StagePool(s, s.workers(cfg)) for s in active}
        self.routes = pipeline.routes(set(self.pools))
        link_downstream(self.pools, self.routes, cfg.engine.stage_queue)  # bounded queues
        self.entry = self.pools[pipeline.entry(set(self.pools)).name]
        self.design_path = design_path(self.pools, self.routes, self.entry)
        self.design = self.design_path[-1]  # the stage whose output the evaluators wait for
        self.downstream = self.pools.get(self.routes[self.design.name], self.design)
        self.policy = policy or AsyncPolicy(cfg.engine.queue_size or self.downstream.bounds.initial)
        self.controller = controller
        self.in_flight: dict[int, Item] = {}  # every issued, unfinished item, by id()
        self.entered: dict[int, Item] = {}  # items the door put in at a stage (promotion), by id()
        self.issuing = True  # False once the run is over (`finish`): the entry draws no new item
        self.changed = asyncio.Condition()
        self.fatal: BaseException | None = None
        self._background: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.door = RunDoor(head, self._wake, self.enter)  # what reaches the head beside the entry
        if ctx.release is not None:
            ctx.release.connect(self.door.released)  # the view's channel, given when it was built
        ctx.extra_evals.connect(lambda: budget.remaining(len(self.in_flight)))
        task_model = client_of(ctx.task)  # its own endpoint down pauses the run too
        self.breakers = Breakers(circuits_of(ctx.llm), circuits_of(task_model.backend) if task_model else ())
        self.breakers.listen(self._wake)

    def designing(self) -> int:
        """Items issued and not yet through the design stages (in a stage or waiting for one)."""
        first = self.design_path[0]
        return sum(p.busy + (p.waiting if p is not first else 0) for p in self.design_path)

    # --- what the progress line, status.json and the adaptive controller read -----------------
    def gauges(self) -> dict[str, Any]:
        out: dict[str, Any] = {"in_flight": len(self.in_flight), "entered": len(self.entered)}
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
        else:
            task = self._spawn(self._worker(pool), f"{stage}-worker")
            pool.tasks.add(task)
            task.add_done_callback(pool.tasks.discard)
        self._size_slots(pool)

    def remove_worker(self, stage: str) -> None:
        pool = self.pools[stage]
        if pool.workers > max(1, pool.bounds.low):
            pool.retiring += 1
            self._size_slots(pool)
            self._wake()

    def _size_slots(self, pool: StagePool) -> None:
        """The evaluating stage's workers are the run's evaluation slots, the research stage's its
        LLM slots (infra/llm/factory.py): they move together."""
        if pool.stage.evaluates:
            self.ctx.evaluations.resize(pool.workers)
        if pool.stage.name == "research":
            follow_research_workers(self.ctx.llm, self.ctx.config, pool.workers)

    # --- the run ---------------------------------------------------------------------------------
    async def run(self, resumed: Sequence[Item] = (),
                  background: Sequence[Callable[[], Awaitable[Any]]] = (),
                  rounds: Sequence[Callable[[], Awaitable[Any]]] = ()) -> None:
        """Run to the end; raises EngineFailure when a fatal error stopped the run. `rounds` are
        background jobs (promotion rounds) that, when the budget ends the run, finish the round
        they are in (a cut-off promotion would be done again after the run, in a second subflow);
        any other stop cancels them with the rest."""
        self._loop = asyncio.get_running_loop()
        for item in resumed:  # a persisted proposal goes on from where it was, never back
            self.in_flight[id(item)] = item
            self.send(item, self.resume_at(item), from_stage=None)
        for pool in self.pools.values():
            for _ in range(pool.bounds.initial):
                self.add_worker(pool.name)
        watchers = [self._spawn(self._watch_stop(), "stop-watcher")]
        if self.controller is not None:
            watchers.append(self._spawn(self.controller.run(self), "adaptive-controller"))
        watchers += [self._spawn(make(), getattr(make, "__name__", "background")) for make in background]
        jobs = [self._spawn(make(), getattr(make, "__name__", "rounds")) for make in rounds]
        try:
            await self._until(lambda: self.fatal is not None or self.stop.is_set() or self._done())
            if self._done() and self.fatal is None and jobs:  # a natural end: let the round finish
                await asyncio.wait(jobs)
        finally:
            await self._shutdown(watchers + jobs)
        if isinstance(self.fatal, LLMOutage):
            raise self.fatal  # the server stayed down: its own one line, not an engine failure
        if self.fatal is not None:
            raise EngineFailure(f"{type(self.fatal).__name__}: {self.fatal}") from self.fatal

    def resume_at(self, item: Item) -> str:
        """Where a resumed proposal goes (flows/engine_paths.py)."""
        return resume_stage(item, self.pipeline, self.pools, self.downstream.name)

    def _done(self) -> bool:
        """Nothing in flight and nothing more may be issued (budget spent or a limit reached)."""
        return not self.in_flight and not self.entered and (not self.issuing or self.budget.remaining(0) == 0)

    async def _shutdown(self, watchers: list[asyncio.Task]) -> None:
        workers = [t for pool in self.pools.values() for t in pool.tasks]
        self.ctx.evaluations.abort_all()
        for task in workers + watchers:
            task.cancel()
        for task, outcome in zip(workers + watchers,
                                 await asyncio.gather(*workers, *watchers, return_exceptions=True),
                                 strict=True):
            if isinstance(outcome, Exception) and self.fatal is None:
                self._fail(task.get_name(), outcome)
        if self.fatal is None:
            self._commit_settled()

    def _commit_settled(self) -> None:
        """At a stop, commit the items whose outcome is known (the counts say what the database does)."""
        for item in list(self.in_flight.values()):
            if item.node is not None and item.node.status.terminal:
                try:
                    self._finish(item)
                except Exception as exc:  # noqa: BLE001 - the fatal path: logged, run() raises it
                    self._fail("commit at stop", exc)
                    return

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

    def fail(self, where: str, exc: BaseException) -> None:
        """The fatal path, from any thread (a sink's, say): the run stops with this error."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._fail, where, exc)

    def _fail(self, where: str, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = DiskFull.of(exc) if disk_full_error(exc) is not None else exc
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

    async def wait_until(self, predicate: Callable[[], bool]) -> bool:
        """Wait until `predicate` holds (checked whenever the engine changes); False when the
        run is stopping, or has done all its budget allows, first."""
        await self._until(lambda: self._stopping() or self._done() or predicate())
        return not self._stopping() and predicate()

    async def enter(self, items: Sequence[Item], stage: str) -> bool:
        """Items the entry stage did not draw (a promotion round's candidates) start their trip at
        `stage`'s pool; returns once the head has them all (False: the run stopped first)."""
        if stage not in self.pools:
            raise RuntimeError(f"this run's pipeline has no '{stage}' stage ({', '.join(self.pools)})")
        for item in items:
            self.entered[id(item)] = item
            self.pools[stage].push(item)
        self._wake()
        return await self.wait_until(lambda: not any(id(item) in self.entered for item in items))

    async def finish(self, job: Callable[[], Awaitable[Any]]) -> None:
        """After the run: `job` puts items in through the door (the last promotion), which the stage
        pools take to the head as in the run; no new item is drawn. A new stop request ends it."""
        self.issuing = False
        self.stop.clear()  # the search's stop (its wall-clock limit) is not this job's
        for pool in self.pools.values():
            pool.retiring = 0
        await self.run(rounds=[job])

    # --- items -----------------------------------------------------------------------------------
    def send(self, item: Item, dest: str, from_stage: str | None) -> None:
        """Route `item` to a stage's queue or to the head (unless the policy holds it)."""
        if from_stage is not None and self.policy.hold(self, from_stage, item, dest):
            return
        while dest != COMMIT and self.pools[dest].stage.skips(item, self.ctx):
            dest = self.routes[dest]  # nothing to do there: straight on
        if dest == COMMIT:
            self._finish(item)
        else:
            self.pools[dest].push(item)
        self._wake()

    def _finish(self, item: Item) -> None:
        """The item's trip ends: the head applies it; a rollback marks what derives from it."""
        if self.head.finished(item) == ROLLBACK:
            self._taint(item)
        if self.entered.pop(id(item), None) is None:  # an item the entry drew: the policy's to count
            self.in_flight.pop(id(item), None)
            self.policy.on_finished(self, item)

    def _taint(self, item: Item) -> None:
        """Mark the items in flight derived from the item's rolled-back node: their next stage's
        door (the staleness policy) decides what becomes of them."""
        assert item.node is not None
        marked = taint_derived(self.in_flight.values(), item.node.id, self.head.state.lineage)
        log.info("rolled back %s; %d in-flight items derived from it marked stale",
                 item.node.id, len(marked))

    def _stopping(self) -> bool:
        return self.fatal is not None or self.stop.is_set()

    async def _take(self, pool: StagePool) -> Item | None:
        """The next item for a worker of `pool`; None when the worker should retire or stop."""
        def ready() -> bool:
            return (self._stopping() or pool.retiring > 0 or pool.waiting > 0
                    or (pool is self.entry and self.issuing and not self.breakers.paused
                        and self.policy.may_issue(self)))

        while True:
            await self._until(ready)
            if self._stopping():
                return None
            if pool.retiring > 0:
                pool.retiring -= 1
                return None
            if pool.waiting > 0:
                return pool.take()
            item = draw_item(self.ctx)  # sampling: an error here is the engine's, hence fatal
            self.policy.on_issued(self)
            self.in_flight[id(item)] = item
            if not pool.stage.skips(item, self.ctx):
                return item
            self.send(item, self.routes[pool.name], from_stage=None)  # the entry has nothing to do for it

    async def _worker(self, pool: StagePool) -> None:
        while (item := await self._take(pool)) is not None:
            admission = pool.stage.admit(item, self.ctx)
            if admission.node is not None:
                item.apply(admission.node)
            if not admission.admitted:
                self.send(item, admission.to, from_stage=None)  # type: ignore[arg-type]
                continue
            pool.busy += 1
            start = time.perf_counter()
            with waiting_time() as waited:  # a wait for an evaluation slot is not work
                try:
                    result = await self._guarded(pool.stage, item)
                finally:
                    pool.busy -= 1
                    pool.busy_s += time.perf_counter() - start - waited.seconds
                    pool.finished += 1
            item.apply(result.node, result.updates)
            dest = result.to or self.routes[pool.name]
            if pool.stage.evaluates and self.head.evaluated(item) == ROLLBACK:
                self._taint(item)  # a release whose evaluation failed left the pool
            if pool.stage.checkpoint and dest != COMMIT:
                self.head.proposed(item, dest)
            await pool.hand_on(dest)  # back-pressure: wait while the next stage's queue is full
            self.send(item, dest, from_stage=pool.name)

    async def _guarded(self, stage: Stage, item: Item) -> StageResult:
        """Run one stage on one item; an error there fails that node (recorded), not the run."""
        try:
            return await self.calls.run(stage, item)
        except LLMOutage:
            raise  # the LLM server is down for good: the run stops, no node is failed for it
        except Exception as exc:  # noqa: BLE001 - recorded on the node and in run.log
            if run_folder_full(exc, self.ctx.paths):  # no node fails for it: the run stops, resumes later
                full = DiskFull.of(exc)
                if full is exc:
                    raise
                raise full from exc
            log.error("internal error in the %s stage on %s:\n%s", stage.name, item.label,
                      traceback.format_exc())
            node = item.node.copy() if item.node is not None else new_candidate(item, self.ctx)
            node.status, node.failed_stage, node.reason = FAILED, stage.name, INTERNAL
            node.error = f"internal error in the {stage.name} stage: {type(exc).__name__}: {exc}"
            return StageResult(node, to=COMMIT)
