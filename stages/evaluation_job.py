"""One sandboxed evaluation as a self-contained job, and the runners that execute such jobs.

The engineer stage turns a candidate into an `EvalRequest` (code, task, limits, case order and
the speculation reference, all snapshots) and hands it to the run's `EvaluationRunner`. The job
reads nothing shared, so a runner may execute it inline on the event loop (`InlineEvaluations`),
on a thread of the flow's Prefect task runner, or on another machine (flows/evaluation_tasks.py).
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evoforge.evaluators.cases import CaseOutcome, evaluate_cases
from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task
from evoforge.stages.speculation import Reference, Speculation

Release = Callable[[float, dict[str, float]], None]  # (prefix score, prefix case scores)
_ABORT_POLL_S = 0.05


@dataclass(frozen=True)
class SpeculationRequest:
    """Speculative completion settings of one evaluation, with the reference at dispatch time."""

    alpha: float
    prune: bool
    reference: Reference | None


@dataclass(frozen=True)
class EvalRequest:
    """Everything one evaluation needs; no live run state."""

    node_id: str
    code: str
    task: Task
    limits: SandboxLimits
    scratch: Path
    stage: str = "full"
    order: tuple[str, ...] | None = None  # the validation order of a case-based task
    speculation: SpeculationRequest | None = None


@dataclass(frozen=True)
class EvalReport:
    """What an evaluation produced: the judged outcome and what speculation decided."""

    outcome: EvalOutcome
    score_partial: float | None = None
    released_at: float | None = None
    pruned: bool = False


async def run_evaluation(request: EvalRequest, release: Release | None = None,
                         abort: threading.Event | None = None) -> EvalReport:
    """Evaluate the request's code in the sandbox; `abort` (set from any thread) kills it."""
    job = asyncio.ensure_future(_evaluate(request, release))
    if abort is None:
        return await job
    while not job.done():
        await asyncio.wait({job}, timeout=_ABORT_POLL_S)
        if abort.is_set() and not job.done():
            job.cancel()  # the sandbox kills the process group on its way out
    return job.result()


async def _evaluate(request: EvalRequest, release: Release | None) -> EvalReport:
    if request.order is None:
        outcome = await evaluate_program(request.task, request.code, stage=request.stage,
                                         limits=request.limits, scratch_root=request.scratch)
        return EvalReport(outcome)
    spec = None
    if request.speculation is not None:
        s = request.speculation
        spec = Speculation(s.alpha, len(request.order), s.prune, s.reference, release)
    outcome: CaseOutcome = await evaluate_cases(
        request.task, request.code, list(request.order), on_case=spec.on_case if spec else None,
        limits=request.limits, scratch_root=request.scratch)
    if spec is None:
        return EvalReport(outcome)
    return EvalReport(outcome, score_partial=spec.partial, released_at=spec.released_at,
                      pruned=spec.pruned)


class EvaluationRunner(ABC):
    """Executes evaluation jobs; the flow picks one (inline, or its Prefect task runner)."""

    @abstractmethod
    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        """Run one job to its end and return its report."""

    def abort_all(self) -> None:
        """Kill every job still running (the run is stopping); cancellation does the rest."""
        return None


class InlineEvaluations(EvaluationRunner):
    """Jobs run on the caller's event loop: cancelling the caller kills the sandbox."""

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        return await run_evaluation(request, release)
