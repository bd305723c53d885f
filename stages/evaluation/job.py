"""One sandboxed evaluation as a self-contained job, and the runners that execute such jobs.

The engineer stage turns a candidate into an `EvalRequest` (code, task, limits, case order and
the speculation reference, all snapshots) and hands it to the run's `EvaluationRunner`. With
`quick_test`, the job first runs the task's quick test (its own short timeout) and stops there
when it fails, so both are one job on the same runner. The job reads nothing shared, so a
runner may execute it inline on the event loop (`InlineEvaluations`), on a thread of the flow's
Prefect task runner, or on another machine (stages/evaluation/prefect_tasks.py). `params` (the
candidate's knob values) reach the evaluator of a plain task and its quick test; case-based
tasks take no parameter values (their cases run with every knob at its default).
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evoforge.evaluators.cases import CaseOutcome, evaluate_cases
from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program, quick_test_program
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task
from evoforge.evaluators.task_model import channel_of
from evoforge.stages.population.speculation import Reference, Speculation

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
    level: str = "full"
    order: tuple[str, ...] | None = None  # the validation order of a case-based task
    speculation: SpeculationRequest | None = None
    quick_test: bool = False  # run the task's quick test first; a failing one ends the job
    params: dict[str, Any] | None = None  # knob values for the program (plain tasks only)
    name: str | None = None  # the Prefect task run's name (default: evaluate-<node>)

    def with_name(self, name: str) -> EvalRequest:
        """The same job under another task run name (an Optuna trial, a promotion)."""
        return replace(self, name=name)

    def at_level(self, level: str) -> EvalRequest:
        """The same job at another evaluation level (promotion: full; the final report: final)."""
        return replace(self, level=level, order=None, speculation=None)


@dataclass(frozen=True)
class EvalReport:
    """What an evaluation produced: the judged outcome and what speculation decided.

    When a quick test ran first it is in `quick_test`; when it failed, it is the `outcome` too
    (the full evaluation never ran)."""

    outcome: EvalOutcome
    score_partial: float | None = None
    released_at: float | None = None
    pruned: bool = False
    quick_test: EvalOutcome | None = None
    worker: str | None = None  # host:pid of the Dask worker that ran it; None: the flow process

    @property
    def quick_test_failed(self) -> bool:
        """True when the quick test ran and failed, so the full evaluation did not run."""
        return self.quick_test is not None and not self.quick_test.ok


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
    if not request.quick_test:
        return await _evaluate_fully(request, release)
    quick = await quick_test_program(request.task, request.code, level=request.level,
                                     params=request.params, limits=request.limits,
                                     scratch_root=request.scratch)
    if not quick.ok:
        return EvalReport(quick, quick_test=quick)
    return replace(await _evaluate_fully(request, release), quick_test=quick)


async def _evaluate_fully(request: EvalRequest, release: Release | None) -> EvalReport:
    if request.order is None:
        outcome = await evaluate_program(request.task, request.code, level=request.level,
                                         params=request.params, limits=request.limits,
                                         scratch_root=request.scratch)
        return EvalReport(outcome)
    spec = None
    if request.speculation is not None:
        s = request.speculation
        spec = Speculation(s.alpha, len(request.order), s.prune, s.reference, release)
    on_case = spec.on_case if spec else None
    if request.task.uses_task_model:  # a text artifact: run by the task model, in this process
        outcome: CaseOutcome = await channel_of(request.task).evaluate(request.code, list(request.order),
                                                                        on_case)
    else:
        outcome = await evaluate_cases(request.task, request.code, list(request.order), on_case=on_case,
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

    def resize(self, slots: int) -> None:
        """Evaluate at most `slots` at a time from now on (a runner without slots: nothing to do)."""
        return None

    def timing(self) -> dict[str, float]:
        """The run's evaluation waits so far, for status.json (a runner without slots: none)."""
        return {}


class InlineEvaluations(EvaluationRunner):
    """Jobs run on the caller's event loop: cancelling the caller kills the sandbox."""

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        return await run_evaluation(request, release)
