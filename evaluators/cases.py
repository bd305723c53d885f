"""Evaluate a candidate case by case in one sandboxed run, seeing each case's result as it is done.

A case-based task's ``evaluator.py`` defines ``cases()`` (JSON-able ids, deterministic order) and
``evaluate_case(program_path, case)`` (the metrics of one case, with the objective metric) next
to the plain ``evaluate(program_path)``. Case ids are strings on this side. ``evaluate_cases``
runs the harness once, which imports evaluator.py once and streams one result line per case;
``on_case`` sees each ``CaseResult`` as it arrives and may stop the run (False), which kills the
child at once. The objective is the mean of the per-case objectives (``math.fsum``: the same
whatever the order the cases ran in); other numeric metrics are averaged over the cases that
report them. Per-case text artifacts are dropped, except those of
a failing case. Example::

    order = await list_cases(task)
    outcome = await evaluate_cases(task, code, order, on_case=lambda r: r.index < 9)
    outcome.stopped_early, outcome.cases_done, outcome.score  # True, 10, mean of the first 10
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evoforge.evaluators.eval_clock import timing
from evoforge.evaluators.evaluation import EvalOutcome, metric_failure, numeric_metrics, run_harness
from evoforge.evaluators.sandbox import SandboxLimits, SandboxResult
from evoforge.evaluators.task import EVALUATOR, Task, TaskError

CASES_FILE = ".evoforge-cases.json"  # the order, handed to the harness (which deletes it)
_case_lists: dict[tuple[Path, int, int], list[str]] = {}


@dataclass(frozen=True)
class CaseResult:
    """The result of one validation case of one candidate."""

    case: str
    index: int
    score: float | None
    metrics: dict[str, float]
    error: str | None


@dataclass
class CaseOutcome(EvalOutcome):
    """The judged result of evaluating a candidate on an ordered list of cases."""

    cascade_step: int | None = None
    case_scores: dict[str, float] = field(default_factory=dict)
    cases_done: int = 0
    cases_total: int = 0
    stopped_early: bool = False


async def list_cases(
    task: Task, limits: SandboxLimits | None = None, scratch_root: Path | None = None
) -> list[str]:
    """The task's case ids as strings, from ``cases()`` run once in the sandbox (then cached)."""
    _require_case_based(task)
    stat = task.evaluator_path.stat()
    key = (task.root, stat.st_mtime_ns, stat.st_size)
    if key not in _case_lists:
        result = await run_harness(
            task, task.initial_code, ["--list-cases"], limits=limits, scratch_root=scratch_root
        )
        _case_lists[key] = _listed_cases(result)
    return list(_case_lists[key])


def _listed_cases(result: SandboxResult) -> list[str]:
    payload = result.payload or {}
    if payload.get("ok") is not True:
        reason = payload.get("error") or result.describe_failure() or "no reason given"
        raise TaskError(f"{EVALUATOR}: cannot list the cases: {' '.join(str(reason).split())}")
    cases = payload.get("cases")
    if not isinstance(cases, list) or not cases or not all(isinstance(c, str) for c in cases):
        raise TaskError(f"{EVALUATOR}: cases() must return a non-empty list of ids, got {cases!r}")
    return cases


async def evaluate_cases(
    task: Task,
    code: str,
    order: Sequence[str],
    *,
    on_case: Callable[[CaseResult], bool] | None = None,
    limits: SandboxLimits | None = None,
    scratch_root: Path | None = None,
) -> CaseOutcome:
    """Evaluate ``code`` on the cases in ``order``; ``on_case`` (on the event loop) may stop it.

    A failing case (exception, ``error`` value, missing or non-finite objective) fails the
    candidate and ends the run; so do a crash, a timeout or an exit before the last case. A stop
    asked by ``on_case`` keeps ``ok`` and scores the cases done (``stopped_early`` when some were
    left). An exception raised by ``on_case`` kills the run and propagates.
    """
    _require_case_based(task)
    ids = [str(case) for case in order]
    if not ids:
        raise ValueError("evaluate_cases needs at least one case")
    if len(set(ids)) != len(ids):
        raise ValueError(f"the case order repeats ids: {sorted({c for c in ids if ids.count(c) > 1})}")
    run = _CaseRun(task, ids, on_case)
    with timing() as clock:  # its own time, its loop waits apart (as evaluation.py's)
        result = await run_harness(
            task,
            code,
            ["--cases-file", CASES_FILE],
            limits=limits,
            scratch_root=scratch_root,
            files={CASES_FILE: json.dumps(ids)},
            on_line=run.on_line,
        )
    seconds, wait_s = clock.split(result.exited_at, result.finished_at or time.monotonic())
    outcome = run.outcome(result, seconds)
    outcome.wait_s = wait_s
    outcome.metrics.update(result.task_model or {})  # the task-model calls it made, if it declares them
    return outcome


def _require_case_based(task: Task) -> None:
    if not task.case_based:
        raise TaskError(
            f"task '{task.name}' is not case-based: {EVALUATOR} must define cases() and "
            "evaluate_case(program_path, case), and task.yaml must not say 'cases: false'"
        )


class _CaseRun:
    """Collects the streamed case lines of one run and judges them."""

    def __init__(self, task: Task, order: list[str], on_case: Callable[[CaseResult], bool] | None):
        self.task = task
        self.order = order
        self.on_case = on_case
        self.results: list[CaseResult] = []
        self.failure: str | None = None
        self.artifacts: dict[str, str] = {}
        self.finished = False
        self.stop_asked = False
        self.cpu_s: float | None = None  # the harness's CPU seconds, on its last line

    def on_line(self, record: dict) -> bool:
        """Handle one result line; False stops the run."""
        if record.get("done") is True:
            self.finished = True
            cpu = record.get("cpu_s")
            self.cpu_s = float(cpu) if isinstance(cpu, int | float) else None
            if record.get("error"):
                self._fail(str(record["error"]), record.get("artifacts"))
            return True
        case, index = str(record.get("case")), len(self.results)
        if index >= len(self.order) or case != self.order[index]:
            expected = self.order[index] if index < len(self.order) else "none"
            self._fail(f"the harness reported case {case!r} where {expected!r} was due", None)
            return False
        artifacts = _texts(record.get("artifacts"))
        metrics = numeric_metrics(record.get("metrics"))
        error = record.get("error")
        if error is None:
            error = metric_failure(self.task, metrics, artifacts, f"evaluate_case({case!r}) result")
        score = None if error else metrics[self.task.objective]
        result = CaseResult(case, index, score, metrics, None if error is None else str(error))
        self.results.append(result)
        if error:
            self._fail(f"case {case} failed: {error}", {**artifacts, "failure_case": case})
        keep_going = self.on_case(result) if self.on_case is not None else True
        if error:
            return False
        self.stop_asked = keep_going is False
        return not self.stop_asked

    def _fail(self, reason: str, artifacts: object) -> None:
        if self.failure is None:
            self.failure = reason
            self.artifacts = _texts(artifacts)

    def outcome(self, result: SandboxResult, seconds: float) -> CaseOutcome:
        """The judged outcome once the run is over."""
        done = [r for r in self.results if r.error is None]
        total = len(self.order)
        progress = f" ({len(done)}/{total} cases done)"
        error = self.failure
        if error is None and result.stream_error:
            error = f"unreadable result stream: {result.stream_error}{progress}"
        elif error is None and not self.stop_asked and not (self.finished and len(done) == total):
            error = result.describe_failure(progress, missing="every case result") or (
                f"the harness stopped early{progress}"
            )
        ok = error is None
        scores = {r.case: r.score for r in done if r.score is not None}
        return CaseOutcome(
            ok=ok,
            score=math.fsum(scores.values()) / len(scores) if ok and scores else None,
            case_scores=scores,
            metrics=_mean_metrics([r.metrics for r in done]),
            artifacts=self.artifacts,
            error=error,
            seconds=seconds,
            cases_done=len(done),
            cases_total=total,
            stopped_early=self.stop_asked and len(done) < total,
            stdout_tail=result.stdout_tail,
            stderr_tail=result.stderr_tail,
            process_limit=result.process_limit,
            cpu_s=self.cpu_s,
        )


def _texts(raw: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the rows that have it, in first-seen key order."""
    sums: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            sums.setdefault(key, []).append(value)
    return {key: math.fsum(values) / len(values) for key, values in sums.items()}
