"""One stage's worker pool: its bounded input queue, its workers, and its meters.

Back-pressure (GEPA's async engine bounds each stage's buffer the same way): a worker whose item
goes on along its stage's default route waits, before handing it over, while the next stage's
queue is full. The bound is `engine.stage_queue` items, or by default twice the next stage's
workers. Only default routes wait, and only where following them from the next stage never comes
back (`link_downstream`), so every item already issued can finish: the last stage before the
head never waits, and a stage that waits only waits for one nearer the head. A hand-off off the
default route (a repair, a reflection, a resumed item, a barrier's release) never waits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from evoforge.stages.pipeline.stage import COMMIT, Stage, WorkerBounds
from evoforge.stages.population.item import Item


@dataclass
class StagePool:
    """A stage plug-in with what the engine keeps for it: the items waiting for it, its worker
    tasks (some may be retiring), and what it has done (items finished, busy worker-seconds)."""

    stage: Stage
    bounds: WorkerBounds
    queue: deque[Item] = field(default_factory=deque)
    tasks: set[asyncio.Task] = field(default_factory=set)
    retiring: int = 0
    busy: int = 0  # workers inside a stage run right now
    finished: int = 0
    busy_s: float = 0.0
    bound: int | None = None  # engine.stage_queue; None: twice the workers
    route: str = COMMIT  # where results go by default
    downstream: StagePool | None = None  # that stage's pool, when hand-offs to it wait for room
    peak: int = 0  # the longest the queue has been
    blocked: int = 0  # workers upstream waiting for room in this queue
    _waiters: list[asyncio.Future] = field(default_factory=list, repr=False)

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def workers(self) -> int:
        """Workers that will take another item (retiring ones excluded)."""
        return len(self.tasks) - self.retiring

    @property
    def waiting(self) -> int:
        return len(self.queue)

    @property
    def capacity(self) -> int:
        """Items the queue holds before the stage feeding it waits."""
        return self.bound if self.bound is not None else 2 * max(1, self.workers)

    def push(self, item: Item) -> None:
        """Queue an item (the caller waited for room when the hand-off must)."""
        self.queue.append(item)
        self.peak = max(self.peak, len(self.queue))

    def take(self) -> Item:
        """The next waiting item; the workers waiting for room here look again."""
        item = self.queue.popleft()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return item

    async def hand_on(self, dest: str) -> None:
        """Before handing an item to `dest`: wait while that is the default route and its queue
        is full (cancelled with the worker at a stop)."""
        target = self.downstream
        if target is None or dest != self.route:
            return
        while target.waiting >= target.capacity:
            waiter = asyncio.get_running_loop().create_future()
            target._waiters.append(waiter)
            target.blocked += 1
            try:
                await waiter
            finally:
                target.blocked -= 1

    def meter(self) -> tuple[int, float]:
        """(items finished, busy worker-seconds) so far."""
        return self.finished, self.busy_s

    def gauges(self) -> dict[str, float]:
        return {f"{self.name}_workers": self.workers, f"{self.name}_busy": self.busy,
                f"{self.name}_queue": self.waiting, f"{self.name}_finished": self.finished,
                f"{self.name}_busy_s": round(self.busy_s, 3), f"{self.name}_queue_peak": self.peak,
                f"{self.name}_blocked": self.blocked}


def link_downstream(pools: Mapping[str, StagePool], routes: Mapping[str, str], bound: int | None) -> None:
    """Give every pool its default route, its queue bound, and the pool its hand-offs wait for
    (none when the route ends at the head or, followed on, comes back to the pool)."""
    for name, pool in pools.items():
        pool.bound, pool.route = bound, routes.get(name, COMMIT)
        nxt, seen = pool.route, {name}
        while nxt != COMMIT and nxt in pools and nxt not in seen:
            seen.add(nxt)
            nxt = routes.get(nxt, COMMIT)
        looped = nxt != COMMIT and nxt in seen
        pool.downstream = None if looped or pool.route not in pools else pools[pool.route]
