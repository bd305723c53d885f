"""Evaluate one candidate program of a task in the sandbox and judge the result.

``evaluate_program`` copies the task folder to a private temp dir, writes the candidate over the
program file (a ``files`` candidate: over each file it changed; its evaluator gets the folder),
runs ``harness.py`` there under ``run_sandboxed``, and turns what came back into an
``EvalOutcome``. A candidate fails (``ok=False``, with the reason in ``error``) when the child
wrote no result (timeout, signal, ``os._exit``), the evaluator raised, or the result has no
finite score (``evaluators/fitness.py``: the objective metric, else OpenEvolve's mean of the
numeric metrics); an ``error`` entry beside a score is kept as an artifact, as OpenEvolve keeps it.
``quick_test_program`` runs the task's quick test (``task.yaml``: ``quick_test``) the same way,
under its own short timeout: it passes unless the function raises, reports ``ok`` false or a
non-empty ``error``, or the run dies. Both hand the level (with its declared ``data_fraction``)
and the candidate's parameter values (``params``, its knob values, written to ``PARAMS_FILE``
for the harness) to the child; ``cpu_s`` is the CPU time the child reported. ``seconds`` is the
evaluation's own time, from its start to its child's exit as the fork server saw it, without the
time it waited for a busy event loop before its child started; those waits and the loop's delay
in seeing the result are ``wait_s`` (eval_clock.py). A task that declares
``task_model: true`` gets a link to the run's task model in each run (task_model_link.py); its
calls' usage joins the outcome's metrics (``task_model_calls``, ...). Example::

    outcome = await evaluate_program(load_task("circle_packing"), code, params={"C": 2.0})
    outcome.ok, outcome.score, outcome.error, outcome.cpu_s
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evoforge.evaluators.eval_clock import EvalClock, current, timing
from evoforge.evaluators.fitness import objective_score
from evoforge.evaluators.io_threads import off_loop
from evoforge.evaluators.sandbox import SandboxLimits, SandboxResult, run_sandboxed, scratch_dir
from evoforge.evaluators.task import EVALUATOR, Task
from evoforge.evaluators.task_files import TaskFiles
from evoforge.evaluators.task_model_link import open_link
from evoforge.evaluators.warm import COMPAT_DIR, WARM, ForkServer, ServerGone

HARNESS = Path(__file__).resolve().parent / "harness.py"
SCORE_RULE = "score_rule"  # the artifact saying how a score not read from the objective was derived
PARAMS_FILE = ".evoforge-params.json"  # the parameter values, handed to the harness (which deletes it)
SANDBOX_RETRY = "sandbox_retry"  # the artifact saying a lost warm evaluation was made again
log = logging.getLogger(__name__)


@dataclass
class EvalOutcome:
    """The judged result of evaluating one program."""

    ok: bool
    score: float | None
    metrics: dict[str, float]
    artifacts: dict[str, str]
    error: str | None
    seconds: float
    cascade_step: int | None
    stdout_tail: str = ""
    stderr_tail: str = ""
    process_limit: str = field(default="none", repr=False)
    cpu_s: float | None = None  # CPU seconds of the sandboxed child (and its children), as reported
    wait_s: float = 0.0  # seconds it waited for the event loop, not in ``seconds`` (eval_clock.py)
    stamps: dict[str, float] = field(default_factory=dict, repr=False)  # monotonic stamps of its steps


async def evaluate_program(
    task: Task,
    code: str,
    *,
    level: str = "full",
    params: dict[str, Any] | None = None,
    limits: SandboxLimits | None = None,
    scratch_root: Path | None = None,
) -> EvalOutcome:
    """Run ``task``'s evaluator on ``code`` at ``level`` with parameter values ``params``; judge it."""
    result, clock = await _run_at_level(task, code, level, params, _harness_args(task), limits,
                                        scratch_root)
    return _timed(judge(task, result, 0.0), result, clock)


async def quick_test_program(
    task: Task,
    code: str,
    *,
    level: str = "full",
    params: dict[str, Any] | None = None,
    limits: SandboxLimits | None = None,
    scratch_root: Path | None = None,
) -> EvalOutcome:
    """Run ``task``'s quick test on ``code`` in the sandbox, under the quick test's own timeout."""
    if task.quick_test is None:
        raise ValueError(f"task '{task.name}' declares no quick test")
    quick = replace(limits or SandboxLimits(), timeout_s=task.quick_test.timeout_s, cpu_s=None)
    result, clock = await _run_at_level(task, code, level, params,
                                        ["--function", task.quick_test.function], quick, scratch_root)
    outcome = _timed(_outcome(result, 0.0), result, clock)
    outcome.error = _run_failure(result, result.payload or {})
    outcome.ok = outcome.error is None
    outcome.metrics.update(result.task_model or {})
    return outcome


async def run_harness(
    task: Task,
    code: str,
    args: list[str],
    *,
    limits: SandboxLimits | None = None,
    scratch_root: Path | None = None,
    files: dict[str, str] | None = None,
    on_line: Callable[[dict], bool] | None = None,
) -> SandboxResult:
    """Run ``harness.py ARGS`` on ``code`` in a private copy of the task folder, then delete it.

    ``files`` are extra text files written into that copy; ``on_line`` streams the result pipe
    (see ``run_sandboxed``). With ``limits.warm`` the child is forked from the task's fork
    server (evaluators/warm.py); one that dies mid-run is replaced and the run made once more
    on a fresh copy (unless a streamed line was already handed on), noted in ``retried``.
    """
    limits = limits or SandboxLimits(timeout_s=task.timeout_s)
    if task.toolchain.expose:  # the tools its evaluator runs, behind closed folders (compat/toolchains.py)
        limits = replace(limits, expose=(*limits.expose, *task.toolchain.expose))
    delivered = [0]

    def counted(line: dict) -> bool:
        delivered[0] += 1
        return on_line(line)  # type: ignore[misc]

    hook = counted if on_line is not None else None
    result = await _harness_once(task, code, args, limits, scratch_root, files, hook)
    if result.lost is None or delivered[0]:
        return result
    WARM.note_retry()
    log.warning("sandbox: %s; evaluating the candidate again on a new fork server", result.lost)
    again = await _harness_once(task, code, args, limits, scratch_root, files, hook)
    again.retried = f"{result.lost}; evaluated again on a new fork server"
    if result.task_model is not None and again.task_model is not None:  # both runs' calls were paid
        again.task_model = {k: v + result.task_model.get(k, 0.0) for k, v in again.task_model.items()}
    return again


async def _harness_once(task: Task, code: str, args: list[str], limits: SandboxLimits,
                        scratch_root: Path | None, files: dict[str, str] | None,
                        on_line: Callable[[dict], bool] | None) -> SandboxResult:
    workdir = Path(tempfile.mkdtemp(prefix="evoforge-eval-", dir=await scratch_dir(scratch_root, limits)))
    prepare = asyncio.ensure_future(off_loop(_prepare, task, code, workdir, files or {}, limits.warm))
    try:
        server = await asyncio.shield(prepare)
        clock = current()
        if clock is not None:
            clock.mark("prepared")
        harness_args = ["--evaluator", str(workdir / EVALUATOR),
                        "--program", str(task.artifact.target(workdir)), *args]
        async with open_link(task, limits.timeout_s) as link:  # None: the task calls no task model
            result = await _launch(harness_args, workdir, limits, on_line, server,
                                   link.child_fd if link is not None else None, dict(task.toolchain.env))
        if link is not None:
            result.task_model = link.usage.metrics()
        return result
    finally:
        if not prepare.done():  # cancelled mid-copy: let the copy finish, then delete it
            await asyncio.wait({prepare})
        try:
            await off_loop(shutil.rmtree, workdir, True)
        except asyncio.CancelledError:
            shutil.rmtree(workdir, ignore_errors=True)
            raise


async def _launch(harness_args: list[str], workdir: Path, limits: SandboxLimits,
                  on_line: Callable[[dict], bool] | None, server: ForkServer | None,
                  task_model_fd: int | None, toolchain_env: dict[str, str]) -> SandboxResult:
    """The harness run in `workdir`: forked by `server` (None, or gone: started cold)."""
    env = {"PYTHONPATH": f"{workdir}{os.pathsep}{COMPAT_DIR}", "PYTHONUNBUFFERED": "1", **toolchain_env}
    if server is not None:
        try:
            return _done(await run_sandboxed(harness_args, workdir, limits, env=env, on_line=on_line,
                                             launcher=server, task_model_fd=task_model_fd))
        except ServerGone as exc:  # died between two evaluations: nothing of this one ran
            log.warning("sandbox: %s; this evaluation runs cold", exc)
    argv = [sys.executable, str(HARNESS), *harness_args]
    return _done(await run_sandboxed(argv, workdir, limits, env=env, on_line=on_line,
                                     task_model_fd=task_model_fd))


def _done(result: SandboxResult) -> SandboxResult:
    """Stamp when the result was in (the copy's deletion after it is not the evaluation's time)."""
    result.finished_at = time.monotonic()
    return result


async def _run_at_level(task: Task, code: str, level: str, params: dict[str, Any] | None,
                        extra: list[str], limits: SandboxLimits | None,
                        scratch_root: Path | None) -> tuple[SandboxResult, EvalClock]:
    """The harness run with the level and parameter values, plus `extra` arguments; and its clock."""
    with timing() as clock:
        args, files = _settings_args(task, level, params)
        result = await run_harness(task, code, args + extra, limits=limits, scratch_root=scratch_root,
                                   files=files)
    return result, clock


def _timed(outcome: EvalOutcome, result: SandboxResult, clock: EvalClock) -> EvalOutcome:
    """The outcome with its own seconds and its loop wait (see the module doc), and the stamps."""
    seen = result.finished_at or time.monotonic()
    outcome.seconds, outcome.wait_s = clock.split(result.exited_at, seen)
    outcome.stamps = {**clock.marks, "start": clock.start, "seen": seen, "loop_wait": clock.loop_wait,
                      **({"launched": clock.launched} if clock.launched is not None else {}),
                      **({"exited": result.exited_at} if result.exited_at is not None else {})}
    return outcome


def _prepare(task: Task, code: str, workdir: Path, files: dict[str, str], warm: bool) -> ForkServer | None:
    """Fill `workdir` with the task folder, the candidate (the files it changed) and `files`;
    with `warm`, the task's fork server (None: run cold). One trip to the file-work threads."""
    shutil.copytree(  # what the task's .evoforgeignore lists stays home, as on Dask (task_files.py)
        task.root,
        workdir,
        dirs_exist_ok=True,
        ignore=TaskFiles.of(task.root).copy_ignore(task.root),
    )
    task.artifact.write(code, task.initial_code, workdir)
    for name, text in files.items():
        (workdir / name).write_text(text, encoding="utf-8")
    return WARM.find_server(task) if warm else None


def _settings_args(
    task: Task, level: str, params: dict[str, Any] | None
) -> tuple[list[str], dict[str, str]]:
    """Harness arguments and files carrying the level, its data fraction and the parameter values."""
    args = ["--level", level]
    fraction = next((s.data_fraction for s in task.levels if s.name == level), None)
    if fraction is not None:
        args += ["--data-fraction", repr(fraction)]
    if params is None:
        return args, {}
    return [*args, "--params-file", PARAMS_FILE], {PARAMS_FILE: json.dumps(params)}


def _harness_args(task: Task) -> list[str]:
    args = []
    if task.level_aware:
        args.append("--level-aware")
    if task.params_aware:
        args.append("--params-aware")
    if task.cascade:
        args += ["--cascade", "--thresholds", ",".join(repr(t) for t in task.cascade_thresholds)]
    return args


def judge(task: Task, result: SandboxResult, seconds: float) -> EvalOutcome:
    """Turn a sandbox result into an outcome, applying the failure rules of the module doc; the
    task-model calls it made join its metrics after the score (never part of a fitness mean)."""
    outcome = _judged(task, result, seconds)
    outcome.metrics.update(result.task_model or {})
    return outcome


def _judged(task: Task, result: SandboxResult, seconds: float) -> EvalOutcome:
    outcome = _outcome(result, seconds)
    payload = result.payload or {}
    outcome.error = _run_failure(result, payload)
    if outcome.error is not None:
        return outcome
    cascade = f" (cascade stopped at stage {payload.get('cascade_step')})" if task.cascade else ""
    flags = payload.get("flags") if isinstance(payload.get("flags"), list) else ()
    score = objective_score(task, outcome.metrics, outcome.artifacts, flags, f"evaluator result{cascade}")
    outcome.score, outcome.error, outcome.ok = score.value, score.failure, score.failure is None
    if score.rule is not None and outcome.ok:
        outcome.artifacts[SCORE_RULE] = score.rule
    return outcome


def _outcome(result: SandboxResult, seconds: float) -> EvalOutcome:
    """A not-yet-judged outcome carrying what the run reported."""
    payload = result.payload or {}
    stage = payload.get("cascade_step")
    cpu = payload.get("cpu_s")
    return EvalOutcome(
        ok=False,
        score=None,
        metrics=numeric_metrics(payload.get("metrics")),
        artifacts={**{str(k): str(v) for k, v in (payload.get("artifacts") or {}).items()},
                   **({SANDBOX_RETRY: result.retried} if result.retried else {})},
        error=None,
        seconds=seconds,
        cascade_step=stage if isinstance(stage, int) else None,
        stdout_tail=result.stdout_tail,
        stderr_tail=result.stderr_tail,
        process_limit=result.process_limit,
        cpu_s=float(cpu) if isinstance(cpu, int | float) and not isinstance(cpu, bool) else None,
    )


def numeric_metrics(raw: object) -> dict[str, float]:
    """The numeric entries of a reported metrics mapping, as floats."""
    items = raw.items() if isinstance(raw, dict) else ()
    return {str(k): float(v) for k, v in items if isinstance(v, int | float) and not isinstance(v, bool)}


def _run_failure(result: SandboxResult, payload: dict) -> str | None:
    """Why a run produced no usable report: it died, timed out, or the harness reported a failure."""
    if result.timed_out or result.payload is None:
        return result.describe_failure() or "the evaluation produced no result"
    if payload.get("ok") is not True:
        return str(payload.get("error") or "the evaluator failed without a reason")
    return None


def metric_failure(
    task: Task, metrics: dict[str, float], artifacts: dict[str, str], source: str = "evaluator result"
) -> str | None:
    """Why a returned result has no finite objective metric (no OpenEvolve mean: case results)."""
    return objective_score(replace(task, objective_declared=True), metrics, artifacts, source=source).failure
