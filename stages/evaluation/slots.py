"""Evaluation slots: every sandboxed evaluation of a run (the engineer's, Optuna trials,
promotions) holds one of the run's slots while it runs, so the evaluators share one worker
budget instead of each stage bringing its own. The slots are the evaluating stage's workers:
when adaptive control gives the engineer a worker, the run may evaluate one more at a time.

Time spent waiting for a slot is not work: a stage run measures it with `waiting_time()` and
leaves it out of its busy seconds (so adaptive control sees a stage's own rate, not a queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass

from evoforge.stages.evaluation.job import EvalReport, EvalRequest, EvaluationRunner, Release


@dataclass
class Waited:
    """Seconds the current stage run spent waiting for an evaluation slot."""

    seconds: float = 0.0


_WAITED: contextvars.ContextVar[Waited | None] = contextvars.ContextVar("evoforge_slot_wait", default=None)


@contextlib.contextmanager
def waiting_time() -> Iterator[Waited]:
    """Measure the slot waits of the code inside (its tasks included)."""
    waited = Waited()
    token = _WAITED.set(waited)
    try:
        yield waited
    finally:
        _WAITED.reset(token)


class SlottedEvaluations(EvaluationRunner):
    """Runs jobs on `inner`, at most `slots` at a time (first come, first served); `resize`
    changes the number of slots while jobs run (a job running over the new number finishes)."""

    def __init__(self, inner: EvaluationRunner, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"evaluation slots must be at least 1, got {slots}")
        self.inner, self.slots = inner, slots
        self._changed: asyncio.Condition | None = None
        self.running = 0
        self.most_running = 0  # the highest number of evaluations seen at once

    def resize(self, slots: int) -> None:
        """Evaluate at most `slots` at a time from now on (at least one)."""
        self.slots = max(1, slots)
        if self._changed is not None:
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        if self._changed is None:
            self._changed = asyncio.Condition()
        start = time.perf_counter()
        async with self._changed:
            await self._changed.wait_for(lambda: self.running < self.slots)
            self.running += 1
        waited = _WAITED.get()
        if waited is not None:
            waited.seconds += time.perf_counter() - start
        self.most_running = max(self.most_running, self.running)
        try:
            return await self.inner.run(request, release)
        finally:
            self.running -= 1
            async with self._changed:
                self._changed.notify_all()

    def abort_all(self) -> None:
        self.inner.abort_all()
