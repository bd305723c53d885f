"""Evaluate one candidate program of a task in the sandbox and judge the result.

``evaluate_program`` copies the task folder to a private temp dir, writes the candidate over the
program file, runs ``harness.py`` there under ``run_sandboxed``, and turns what came back into an
``EvalOutcome``. A candidate fails (``ok=False``, with the reason in ``error``) when the child
wrote no result (timeout, signal, ``os._exit``), the evaluator raised, the objective metric is
missing or not finite, or the evaluator returned a non-empty ``error`` value (OpenEvolve style).
Example::

    outcome = await evaluate_program(load_task("circle_packing"), code)
    outcome.ok, outcome.score, outcome.error
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from evoforge.evaluators.sandbox import SandboxLimits, SandboxResult, run_sandboxed
from evoforge.evaluators.task import EVALUATOR, Task

HARNESS = Path(__file__).resolve().parent / "harness.py"
COMPAT_DIR = Path(__file__).resolve().parent / "compat"


@dataclass
class EvalOutcome:
    """The judged result of evaluating one program."""

    ok: bool
    score: float | None
    metrics: dict[str, float]
    artifacts: dict[str, str]
    error: str | None
    seconds: float
    cascade_stage: int | None
    stdout_tail: str = ""
    stderr_tail: str = ""
    process_limit: str = field(default="none", repr=False)


async def evaluate_program(
    task: Task,
    code: str,
    *,
    stage: str = "full",
    limits: SandboxLimits | None = None,
    scratch_root: Path | None = None,
) -> EvalOutcome:
    """Run ``task``'s evaluator on ``code`` in the sandbox and judge the result."""
    start = time.monotonic()
    limits = limits or SandboxLimits(timeout_s=task.timeout_s)
    workdir = Path(tempfile.mkdtemp(prefix="evoforge-eval-", dir=scratch_root))
    prepare = asyncio.ensure_future(asyncio.to_thread(_prepare, task, code, workdir))
    try:
        await asyncio.shield(prepare)
        result = await run_sandboxed(
            _harness_argv(task, workdir, stage),
            workdir,
            limits,
            env={"PYTHONPATH": f"{workdir}{os.pathsep}{COMPAT_DIR}", "PYTHONUNBUFFERED": "1"},
        )
    finally:
        if not prepare.done():  # cancelled mid-copy: let the copy finish, then delete it
            await asyncio.wait({prepare})
        shutil.rmtree(workdir, ignore_errors=True)
    return judge(task, result, time.monotonic() - start)


def _prepare(task: Task, code: str, workdir: Path) -> None:
    shutil.copytree(
        task.root,
        workdir,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    (workdir / task.program_name).write_text(code, encoding="utf-8")


def _harness_argv(task: Task, workdir: Path, stage: str) -> list[str]:
    argv = [
        sys.executable,
        str(HARNESS),
        "--evaluator", str(workdir / EVALUATOR),
        "--program", str(workdir / task.program_name),
        "--stage", stage,
    ]
    if task.stage_aware:
        argv.append("--stage-aware")
    if task.cascade:
        argv += ["--cascade", "--thresholds", ",".join(repr(t) for t in task.cascade_thresholds)]
    return argv


def judge(task: Task, result: SandboxResult, seconds: float) -> EvalOutcome:
    """Turn a sandbox result into an outcome, applying the failure rules of the module doc."""
    payload = result.payload or {}
    metrics = {
        str(k): float(v)
        for k, v in (payload.get("metrics") or {}).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    artifacts = {str(k): str(v) for k, v in (payload.get("artifacts") or {}).items()}
    stage = payload.get("cascade_stage")
    outcome = EvalOutcome(
        ok=False,
        score=None,
        metrics=metrics,
        artifacts=artifacts,
        error=None,
        seconds=seconds,
        cascade_stage=stage if isinstance(stage, int) else None,
        stdout_tail=result.stdout_tail,
        stderr_tail=result.stderr_tail,
        process_limit=result.process_limit,
    )
    outcome.error = _failure(task, result, payload, metrics, artifacts)
    if outcome.error is None:
        outcome.ok = True
        outcome.score = metrics[task.objective]
    return outcome


def _failure(
    task: Task,
    result: SandboxResult,
    payload: dict,
    metrics: dict[str, float],
    artifacts: dict[str, str],
) -> str | None:
    if result.timed_out or result.payload is None:
        return result.describe_failure() or "the evaluation produced no result"
    if payload.get("ok") is not True:
        return str(payload.get("error") or "the evaluator failed without a reason")
    reported = artifacts.get("error", "").strip()
    if reported:
        return f"evaluator reported error: {' '.join(reported.split())[:1000]}"
    if task.objective not in metrics:
        present = ", ".join(sorted(metrics)) or "none"
        cascade = f" (cascade stopped at stage {payload.get('cascade_stage')})" if task.cascade else ""
        return (
            f"metric '{task.objective}' missing from evaluator result{cascade}; "
            f"numeric metrics present: {present}"
        )
    value = metrics[task.objective]
    if not math.isfinite(value):
        return f"metric '{task.objective}' is not finite ({value})"
    return None
