"""One scheduler for every LLM call of a run, per endpoint: a number of slots and priorities.

A call asks for a slot at a priority (`asking`, set by the stage that makes it); when every slot is
busy it waits, and the next free slot goes to the waiting call of the highest priority (lowest
number), then of the best rank within it, then the oldest. A call waiting longer than `aging_s`
moves up one priority per `aging_s`, so a steady stream of proposals never starves an analysis
for ever. A call asked as refusable (an analysis the run can do without) waits only while fewer
than `keep` such calls of its priority wait; past that the worst-ranked of them is refused
(`SlotRefused`) and its stage falls back to something cheaper.

`ScheduledBackend` wraps a run's backend (any LLMBackend) with a scheduler; every attribute it does
not define (`circuit`, `context_window`, `count_tokens`, `check`, ...) is the wrapped backend's.

    >>> import asyncio
    >>> async def demo() -> list[str]:
    ...     scheduler, order = Scheduler(slots=1, aging_s=None), []
    ...     await scheduler.acquire(Ask(PROPOSE))  # the only slot, busy
    ...     async def call(name: str, priority: int) -> None:
    ...         await scheduler.acquire(Ask(priority))
    ...         order.append(name)
    ...         scheduler.release()
    ...     asked = (("plan", PLAN), ("analysis", ANALYZE), ("repair", PROPOSE))
    ...     calls = [asyncio.create_task(call(name, priority)) for name, priority in asked]
    ...     await asyncio.sleep(0)
    ...     scheduler.release()
    ...     await asyncio.gather(*calls)
    ...     return order
    >>> asyncio.run(demo())
    ['repair', 'analysis', 'plan']
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from evoforge.infra.llm.types import Completion, LLMBackend

# priorities, most urgent first: proposals and repairs, reflections, analyses, plans, judge, queries
PROPOSE = 0  # research (a proposal) and debug (a repair)
REFLECT = 1  # the reflect stage and ACE's reflector
ANALYZE = 2  # the Analyzer
PLAN = 3  # the plan agent
JUDGE = 4  # the judge
QUERY = 5  # anything else (and a call made without a priority)
PRIORITY_NAMES = {PROPOSE: "propose", REFLECT: "reflect", ANALYZE: "analyze", PLAN: "plan",
                  JUDGE: "judge", QUERY: "query"}


class SlotRefused(RuntimeError):
    """A refusable call that lost its place in the queue to better-ranked ones: it was not made."""


@dataclass(frozen=True)
class Ask:
    """How a call asks for a slot: its priority, its rank within it (lower first) and, for a
    refusable call, how many refusable calls of its priority may wait at once (None: never refused)."""

    priority: int = QUERY
    rank: tuple[float, ...] = ()
    keep: int | None = None


_ASK: ContextVar[Ask | None] = ContextVar("evoforge_llm_ask", default=None)


@contextmanager
def asking(priority: int, rank: tuple[float, ...] = (), keep: int | None = None) -> Iterator[Ask]:
    """The LLM calls made inside ask for slots at `priority` (see `Ask`)."""
    ask = Ask(priority, rank, keep)
    token = _ASK.set(ask)
    try:
        yield ask
    finally:
        _ASK.reset(token)


@dataclass(frozen=True)
class Load:
    """The scheduler's load now: slots, slots busy, calls waiting by priority, and whether the LLM
    binds (a call is waiting, or one had to wait within the recent window)."""

    slots: int
    busy: int
    waiting: dict[int, int]
    binds: bool
    calls: int  # calls given a slot so far
    waited: int  # of those, calls that had to wait for it
    refused: int  # refusable calls refused

    def as_dict(self) -> dict[str, Any]:
        """The load for status.json: waiting calls by priority name."""
        return {"slots": self.slots, "busy": self.busy, "binds": self.binds, "calls": self.calls,
                "waited": self.waited, "refused": self.refused,
                "waiting": {PRIORITY_NAMES.get(p, str(p)): n for p, n in sorted(self.waiting.items()) if n}}


@dataclass(order=True)
class _Waiter:
    priority: int
    rank: tuple[float, ...]
    seq: int
    since: float = field(compare=False)
    keep: int | None = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


class Scheduler:
    """Slots for one endpoint's calls, handed out by priority (see the module's docstring)."""

    def __init__(self, slots: int, window_s: float = 10.0, aging_s: float | None = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, not {slots}")
        self.slots, self.window_s, self.aging_s, self._clock = slots, window_s, aging_s, clock
        self.busy = 0
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()
        self._last_wait: float | None = None
        self.calls = self.waited = self.refused = 0

    async def acquire(self, ask: Ask) -> None:
        """Wait for a slot at `ask`'s priority (raises SlotRefused for a refused refusable call)."""
        if self.busy < self.slots and not self._waiters:
            self.busy += 1
            self.calls += 1
            return
        now = self._clock()
        self._last_wait = now
        waiter = _Waiter(ask.priority, ask.rank, next(self._seq), now, ask.keep,
                         asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        if ask.keep is not None:
            self._refuse_beyond(ask.priority, ask.keep)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self.release()  # given the slot as it was cancelled: pass it on
            raise
        self.calls += 1
        self.waited += 1

    def release(self) -> None:
        """Give the slot back: to the most urgent waiting call, else free it (also when the
        slots were cut below the calls in flight)."""
        if self._waiters and self.busy <= self.slots:
            waiter = self._next()
            self._waiters.remove(waiter)
            waiter.future.set_result(None)  # the slot passes to it: busy stays
            return
        self.busy -= 1

    def resize(self, slots: int) -> None:
        """Let `slots` calls through at once from now on (adaptive control moved the research
        workers): more slots go to waiting calls at once; fewer take effect as calls end."""
        self.slots = max(1, slots)
        while self._waiters and self.busy < self.slots:
            waiter = self._next()
            self._waiters.remove(waiter)
            self.busy += 1
            waiter.future.set_result(None)

    def load(self) -> Load:
        """The load now (see `Load`)."""
        waiting: dict[int, int] = {}
        for waiter in self._waiters:
            waiting[waiter.priority] = waiting.get(waiter.priority, 0) + 1
        recent = self._last_wait is not None and self._clock() - self._last_wait <= self.window_s
        return Load(self.slots, self.busy, waiting, bool(self._waiters) or recent, self.calls,
                    self.waited, self.refused)

    def binds(self) -> bool:
        """Whether the LLM binds: a call waits for a slot now, or one did within `window_s`."""
        return bool(self._waiters) or (self._last_wait is not None
                                       and self._clock() - self._last_wait <= self.window_s)

    def _next(self) -> _Waiter:
        """The waiting call the next slot goes to: by priority (aged), rank, then arrival."""
        now = self._clock()
        return min(self._waiters, key=lambda w: (self._aged(w, now), w.rank, w.seq))

    def _aged(self, waiter: _Waiter, now: float) -> int:
        if self.aging_s is None:
            return waiter.priority
        return max(0, waiter.priority - int((now - waiter.since) / self.aging_s))

    def _refuse_beyond(self, priority: int, keep: int) -> None:
        """Refuse the worst-ranked refusable calls of `priority` beyond the `keep` best waiting."""
        mine = sorted(w for w in self._waiters if w.priority == priority and w.keep is not None)
        for waiter in mine[keep:]:
            self._waiters.remove(waiter)
            self.refused += 1
            refusal = SlotRefused(f"a better-ranked call took its place (priority {priority})")
            waiter.future.set_exception(refusal)


class ScheduledBackend:
    """A backend whose calls go through a scheduler; everything else is the wrapped backend's."""

    def __init__(self, inner: LLMBackend, scheduler: Scheduler) -> None:
        self.inner, self.scheduler = inner, scheduler

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.inner.model

    async def complete(self, messages: list[dict[str, str]], *, temperature: float,
                       max_tokens: int) -> Completion:
        """The wrapped backend's answer, once a slot is free for the call's priority (`asking`)."""
        await self.scheduler.acquire(_ASK.get() or Ask())
        try:
            return await self.inner.complete(messages, temperature=temperature, max_tokens=max_tokens)
        finally:
            self.scheduler.release()

    def observe(self, model: str, gain: float | None) -> None:
        self.inner.observe(model, gain)

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, attr: str) -> Any:
        if attr in ("inner", "scheduler"):  # not set yet (a copy being built): no recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)  # circuit, context_window, count_tokens, check, ...


def scheduler_of(llm: LLMBackend | None) -> Scheduler | None:
    """The scheduler in front of `llm`, or None (a backend not scheduled: a test's, or none)."""
    return llm.scheduler if isinstance(llm, ScheduledBackend) else None


def unscheduled(llm: LLMBackend) -> LLMBackend:
    """The backend behind `llm`'s scheduler (`llm` itself when it has none)."""
    return llm.inner if isinstance(llm, ScheduledBackend) else llm
