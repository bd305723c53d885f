"""Score a text artifact (a prompt) by running it with a task model on the cases of a split.

A `text` task's ``evaluator.py`` is the task's own code, imported in the run's process (the
artifact is text, not code: nothing of a candidate runs), and defines::

    def cases() -> dict[str, list[dict]]          # {"train": [...], "val": [...], "test": [...]}
    async def run(artifact, case, llm) -> str     # await llm(messages) -> the task model's text
    def metric(case, output) -> float             # the case's score
    def feedback(case, output, score) -> str      # optional: what was wrong, for the proposer

Each case is a dict with a unique string ``id``. The run selects on ``val`` (the engineer's
cases, in the speculation order), ``train`` is for minibatches, and ``test`` never reaches a
search. ``llm`` goes through the run's OpenAI client to the task model's endpoint
(``task_model.llm``, default the proposer's), at most ``task_model.concurrency`` calls at once,
each counted (calls, tokens, seconds, dollars) apart from the proposer's and held to the money
budget. Outputs are cached by (artifact hash, case): no case is paid twice for the same text. A
case whose call fails scores 0 with the reason in the node's feedback and is not cached; a
candidate all of whose calls failed is a failed evaluation with the last reason. An answer cut off
at ``task_model.max_tokens`` is not a failed call: a rambling answer is what the prompt made the
task model do, so the case is run on an empty answer and scored by the task's metric (low), and
the usage counts it (``truncated``).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import inspect
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from evoforge.evaluators.cases import CaseOutcome, CaseResult
from evoforge.evaluators.task import EVALUATOR, Task, TaskError
from evoforge.evaluators.task_model_cache import CaseCache
from evoforge.evaluators.task_model_client import (
    TaskModelClient,
    TaskModelUsage,
    attach_channel,
    client_of,
)
from evoforge.infra.config import ModelPrice
from evoforge.infra.llm.circuit import LLMOutage
from evoforge.infra.llm.types import LLMBackend, LLMError

__all__ = ["FEEDBACK_ARTIFACT", "SPLITS", "TaskChannel", "TaskModelUsage", "TaskModule", "attach_channel",
           "channel_of"]
log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test")
FEEDBACK_ARTIFACT = "feedback"  # the node artifact the research prompt shows the proposer
_FEEDBACK_LINES = 12


class TaskModule:
    """A text task's evaluator, imported once: its cases by split and its functions."""

    def __init__(self, task: Task) -> None:
        name = f"evoforge_task_{hashlib.sha1(str(task.root).encode()).hexdigest()[:12]}"
        spec = importlib.util.spec_from_file_location(name, task.evaluator_path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(task.root))  # the evaluator may import its folder's modules
        try:
            spec.loader.exec_module(module)
            raw = module.cases()
        except Exception as exc:  # the task's own code: one line naming it; the traceback logged
            log.warning("%s of task %s raised", EVALUATOR, task.name, exc_info=True)
            raise TaskError(f"{EVALUATOR}: importing it or calling cases() raised "
                            f"{type(exc).__name__}: {exc}") from None
        finally:
            sys.path.remove(str(task.root))
        self.run, self.metric = module.run, module.metric
        self.feedback: Callable[[dict, str, float], str] | None = getattr(module, "feedback", None)
        self.splits = _splits(raw)
        self.by_id = {case["id"]: case for cases in self.splits.values() for case in cases}

    def ids(self, split: str) -> list[str]:
        return [case["id"] for case in self.splits[split]]


class TaskChannel(TaskModelClient):
    """A text task's way to its task model: the client (backend, bound, meters), the task's
    module and the output cache."""

    def __init__(self, module: TaskModule, backend: LLMBackend, *, concurrency: int, max_tokens: int,
                 temperature: float, prices: Mapping[str, ModelPrice]) -> None:
        super().__init__(backend, concurrency=concurrency, max_tokens=max_tokens, temperature=temperature,
                         prices=prices)
        self.module = module
        self.cache = CaseCache()  # outputs by (artifact hash, case): no case paid twice

    async def evaluate(self, artifact: str, order: list[str],
                       on_case: Callable[[CaseResult], bool] | None = None) -> CaseOutcome:
        """Run `artifact` on the cases in `order` (at once, up to the concurrency), seen in order
        by `on_case`, which may stop it (False): the cases left are cancelled."""
        start, usage = time.monotonic(), TaskModelUsage()
        key = hashlib.sha256(artifact.encode()).hexdigest()
        jobs = [asyncio.ensure_future(self._case(artifact, key, case_id, usage)) for case_id in order]
        scores: dict[str, float] = {}
        notes: list[str] = []
        reason, stopped, failures = None, False, 0
        try:
            for index, (case_id, job) in enumerate(zip(order, jobs, strict=True)):
                score, note, failure = await job
                scores[case_id] = score
                reason, failures = failure or reason, failures + (failure is not None)
                if note:
                    notes.append(f"[{case_id}] {note}")
                if on_case is not None and not on_case(CaseResult(case_id, index, score, {}, None)):
                    stopped = index + 1 < len(order)
                    break
        finally:
            for job in jobs:
                job.cancel()
        self.usage.add(usage)
        seconds = time.monotonic() - start
        failed_all = failures == len(scores) > 0
        mean = math.fsum(scores.values()) / len(scores) if scores else None
        return CaseOutcome(
            ok=not failed_all, score=None if failed_all else mean,
            metrics={**usage.metrics(), "cases_scored": float(len(scores))},
            artifacts={FEEDBACK_ARTIFACT: "\n".join(notes[:_FEEDBACK_LINES])} if notes else {},
            error=f"task model: every call failed (last: {reason})" if failed_all else None,
            seconds=seconds, cascade_step=None, case_scores=scores, cases_done=len(scores),
            cases_total=len(order), stopped_early=stopped)

    def trace(self, artifact: str, case_id: str) -> tuple[str, float, str] | None:
        """(output, score, feedback) of `artifact` on a case it has run (None: not run, or failed)."""
        return self.cache.get(hashlib.sha256(artifact.encode()).hexdigest(), case_id)

    async def _case(self, artifact: str, key: str, case_id: str, usage: TaskModelUsage
                    ) -> tuple[float, str, str | None]:
        """(score, feedback, failure reason) of one case; served from the cache when it has it."""
        cached = self.cache.get(key, case_id)
        if cached is not None:
            usage.cached += 1
            _, score, note = cached
            return score, note, None
        case = self.module.by_id[case_id]

        async def llm(messages: list[dict[str, str]], max_tokens: int | None = None) -> str:
            return await self.ask(messages, usage, max_tokens)

        try:
            output = self.module.run(artifact, case, llm)
            output = str(await output if inspect.isawaitable(output) else output)
        except LLMError as exc:
            usage.failed += 1
            return 0.0, f"task model call failed: {exc}", str(exc)
        except LLMOutage:  # down past llm.circuit.give_up_s: the run stops (resumable), no case is blamed
            raise
        except Exception as exc:  # the task's run(): scored 0, the reason on the node, traceback logged
            log.warning("task model case %s: run() raised", case_id, exc_info=True)
            usage.failed += 1
            return 0.0, f"run() raised {type(exc).__name__}: {exc}", f"run() raised {type(exc).__name__}"
        try:
            score = float(self.module.metric(case, output))
            if not math.isfinite(score):
                raise ValueError(f"metric() returned {score}")
            explain = self.module.feedback
            note = str(explain(case, output, score) or "").strip() if explain is not None else ""
        except Exception as exc:  # the task's metric/feedback: as run()'s
            log.warning("task model case %s: metric() or feedback() raised", case_id, exc_info=True)
            return 0.0, f"metric() or feedback() raised {type(exc).__name__}: {exc}", None
        self.cache.put(key, case_id, (output, score, note))
        return score, note, None


def channel_of(task: Task) -> TaskChannel:
    """The channel attached for text task `task` (RuntimeError when the run attached none)."""
    channel = client_of(task)
    if not isinstance(channel, TaskChannel):
        raise RuntimeError(f"no task model attached for task '{task.name}' in this process")
    return channel


def _splits(raw: Any) -> dict[str, list[dict]]:
    """`cases()`'s splits, checked: one line naming the split or case that is malformed."""
    where = f"{EVALUATOR}: cases()"
    if not isinstance(raw, dict):
        raise TaskError(f"{where} must return a dict of splits ({', '.join(SPLITS)}), got "
                        f"{type(raw).__name__}")
    unknown = [k for k in raw if k not in SPLITS]
    if unknown:
        raise TaskError(f"{where}: unknown split '{unknown[0]}' (splits: {', '.join(SPLITS)})")
    if not raw.get("val"):
        raise TaskError(f"{where}: the 'val' split is missing or empty (the cases candidates are scored on)")
    seen: set[str] = set()
    out: dict[str, list[dict]] = {}
    for split in SPLITS:
        cases = raw.get(split) or []
        if not isinstance(cases, list):
            raise TaskError(f"{where}: split '{split}' must be a list of cases")
        for i, case in enumerate(cases):
            if not isinstance(case, dict) or not isinstance(case.get("id"), str) or not case["id"]:
                raise TaskError(f"{where}: case {i} of '{split}' must be a dict with a string 'id'")
            if case["id"] in seen:
                raise TaskError(f"{where}: case id '{case['id']}' appears twice")
            seen.add(case["id"])
        out[split] = cases
    return out
