"""The simulator's service model: lognormal latencies and a fixed number of serving slots."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def draw_latency(rng: random.Random, median_s: float, sigma: float) -> float:
    """One service time from a lognormal with the given median (heavy-tailed for sigma > 0)."""
    return median_s * math.exp(sigma * rng.gauss(0.0, 1.0)) if median_s > 0 else 0.0


class SlotPool:
    """``slots`` requests are served at once; the rest wait first-in first-out.

    It also keeps the books: time spent waiting for a slot and slot-seconds spent busy
    (including the running time of requests still being served).
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self.slots = slots
        self._semaphore = asyncio.Semaphore(slots)  # FIFO: waiters wake in arrival order
        self._active: dict[int, float] = {}
        self._next_id = 0
        self.reset()

    def reset(self) -> None:
        """Zero the books; requests being served count from now on."""
        now = time.monotonic()
        self._busy_done = 0.0
        self._wait_total = 0.0
        self._wait_count = 0
        self._active = {key: now for key in self._active}

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold one slot for the body of the ``async with``; yields the seconds spent queueing."""
        arrived = time.monotonic()
        await self._semaphore.acquire()
        started = time.monotonic()
        self._wait_total += started - arrived
        self._wait_count += 1
        key, self._next_id = self._next_id, self._next_id + 1
        self._active[key] = started
        try:
            yield started - arrived
        finally:
            self._busy_done += time.monotonic() - self._active.pop(key)
            self._semaphore.release()

    @property
    def in_service(self) -> int:
        """Requests holding a slot now."""
        return len(self._active)

    @property
    def queued(self) -> int:
        """Requests waiting for a slot now."""
        return len(getattr(self._semaphore, "_waiters", None) or ())

    def busy_slot_seconds(self) -> float:
        """Slot-seconds spent serving since the last reset, running requests included."""
        now = time.monotonic()
        return self._busy_done + sum(now - started for started in self._active.values())

    def mean_queue_wait(self) -> float:
        """Mean seconds a request waited for its slot since the last reset."""
        return self._wait_total / self._wait_count if self._wait_count else 0.0
