"""Evaluation slots: every sandboxed evaluation of a run (the engineer's, Optuna trials,
promotions) holds one of the run's slots while it runs, so the evaluators share one worker
budget instead of each stage bringing its own. The slots are the evaluating stage's workers:
when adaptive control gives the engineer a worker, the run may evaluate one more at a time.

Time spent waiting for a slot is not work: a stage run measures it with `waiting_time()` and
leaves it out of its busy seconds (so adaptive control sees a stage's own rate, not a queue).
The run's totals go to status.json (`timing()`): the seconds evaluations waited for a slot, those
from the slot granted to the evaluation started (the Prefect task run around it), and those they
waited for the event loop; their recorded time leaves all three out (evaluators/eval_clock.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass

from evoforge.evaluators.eval_clock import granted
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
        self.timed, self.slot_wait_s, self.loop_wait_s = 0, 0.0, 0.0  # the run's totals (`timing`)
        self.wrapper_s = 0.0

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
        queued = time.perf_counter() - start
        waited = _WAITED.get()
        if waited is not None:
            waited.seconds += queued
        self.slot_wait_s += queued
        self.most_running = max(self.most_running, self.running)
        try:
            with granted():
                report = await self.inner.run(request, release)
            self._account(report)
            return report
        finally:
            self.running -= 1
            async with self._changed:
                self._changed.notify_all()

    def _account(self, report: EvalReport) -> None:
        outcomes = [report.outcome]
        if report.quick_test is not None and report.quick_test is not report.outcome:
            outcomes.insert(0, report.quick_test)
        self.timed += 1
        self.loop_wait_s += sum(o.wait_s for o in outcomes)
        first = outcomes[0].stamps
        if "granted" in first and "start" in first:  # not on a Dask worker: another clock
            self.wrapper_s += max(0.0, first["start"] - first["granted"])

    def timing(self) -> dict[str, float]:
        """The run's evaluations so far: how many, and the seconds they waited for a slot, for
        their wrapper to start them and for the event loop (none of it in their ``eval_s``)."""
        return {"evaluations_timed": self.timed, "eval_slot_wait_s": round(self.slot_wait_s, 3),
                "eval_wrapper_s": round(self.wrapper_s, 3), "eval_loop_wait_s": round(self.loop_wait_s, 3)}

    def abort_all(self) -> None:
        self.inner.abort_all()
