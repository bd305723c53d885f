"""Evaluation slots: every sandboxed evaluation of a run (the engineer's, Optuna trials,
promotions) holds one of a fixed number of slots while it runs, so the evaluators share one
worker budget (`engine.workers.engineer`) instead of each stage bringing its own."""

from __future__ import annotations

import asyncio

from evoforge.stages.evaluation.job import EvalReport, EvalRequest, EvaluationRunner, Release


class SlottedEvaluations(EvaluationRunner):
    """Runs jobs on `inner`, at most `slots` at a time (first come, first served)."""

    def __init__(self, inner: EvaluationRunner, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"evaluation slots must be at least 1, got {slots}")
        self.inner, self.slots = inner, slots
        self._free = asyncio.Semaphore(slots)
        self.running = 0
        self.most_running = 0  # the highest number of evaluations seen at once

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        async with self._free:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            try:
                return await self.inner.run(request, release)
            finally:
                self.running -= 1

    def abort_all(self) -> None:
        self.inner.abort_all()
