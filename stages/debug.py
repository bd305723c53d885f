"""Debug: an LLM repair of a candidate whose evaluation crashed, before it is marked failed.

The debug stage plug-in (ASI-Evolve's engineer debug loop), spliced in behind the engineer. A
candidate that crashed (`classify_failure`: an exception raised in its own code, a fatal signal,
an exit without a result; not a timeout, not an invalid result) and has fewer than
`guard.repair_attempts` recorded tries is shown to the LLM with its error, traceback tail and
program; the fix (SEARCH/REPLACE blocks, answered like a research prompt) goes back to the
engineer as a fresh proposal, the failed try kept in its data (`RepairData.attempts`). Everything else passes
through unchanged; an unusable fix or a failed call keeps the candidate failed, both reasons in
its error.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import PurePath

from evoforge.evaluators.task import EVALUATOR, Task
from evoforge.infra.config import RunConfig
from evoforge.infra.evolve_block import EditError
from evoforge.infra.llm.scheduler import PROPOSE
from evoforge.infra.llm.types import LLMError
from evoforge.infra.node_data import NodeData
from evoforge.infra.nodes import FAILED, PROPOSED, Node
from evoforge.stages.evaluation.guardrails import GUARD, QUICK_TEST_PREFIX
from evoforge.stages.pipeline.llm_call import ask_llm
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.prompt_fit import FEEDBACK, Part, fit_to
from evoforge.stages.research_prompt import diff_rules

CRASH, TIMEOUT, INVALID, NOT_FAILED = "crash", "timeout", "invalid", "not_failed"


@dataclass
class RepairData(NodeData, owner="debug"):
    """What the debug stage keeps on a node: its failed tries, oldest first."""

    attempts: list[dict[str, str]] = field(default_factory=list)

_ENGINEER = "engineer"
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+', re.MULTILINE)
_CASE_PREFIX = re.compile(r"^case \S+ failed: ")
_TIME_LIMITS = ("timed out", "killed by SIGXCPU")  # the wall-clock or the CPU-time limit
_DEATHS = ("killed by", "exited with code")  # a signal, or an exit before the result was written
_ERROR_CHARS, _TRACEBACK_CHARS, _OUTPUT_CHARS = 2000, 4000, 2000


def classify_failure(node: Node, program_names: Collection[str]) -> str:
    """What ended the node's evaluation: CRASH, TIMEOUT, INVALID, or NOT_FAILED (no failed run).

    A crash is an exception whose innermost frame in the task folder is in the program (not in
    evaluator.py, which raising means it judged the result invalid; `program_names` are the
    task's evolvable files), a signal other than the
    CPU-time limit's, or an exit without a result. Static-check failures, rejections, internal
    errors and failed LLM calls ran no evaluation and are NOT_FAILED.
    """
    if node.status != FAILED or not node.was_evaluated or node.failed_stage not in (_ENGINEER, GUARD):
        return NOT_FAILED
    error = _CASE_PREFIX.sub("", (node.error or "").removeprefix(QUICK_TEST_PREFIX), count=1)
    if error.startswith(_TIME_LIMITS):
        return TIMEOUT
    if error.startswith(_DEATHS):
        return CRASH
    return CRASH if _raised_in_program(node.artifacts.get("traceback", ""), program_names) else INVALID


def _raised_in_program(traceback: str, program_names: Collection[str]) -> bool:
    names = {PurePath(n).name for n in program_names}
    for path in reversed(_FRAME.findall(traceback)):
        name = PurePath(path).name
        if name in names:
            return True
        if name == EVALUATOR:
            return False
    return False


def attempt_record(node: Node) -> dict[str, str]:
    """One entry of `RepairData.attempts`: the failed try's error, code hash, seconds and output tails."""
    earlier = sum(float(a.get("eval_s", 0.0)) for a in RepairData.peek(node).attempts)
    return {
        "error": (node.error or "")[:_ERROR_CHARS],
        "code_sha": hashlib.sha256(node.code.encode("utf-8")).hexdigest()[:16],
        "eval_s": f"{max(node.eval_s - earlier, 0.0):.3f}",
        "traceback": node.artifacts.get("traceback", "")[-_TRACEBACK_CHARS:],
        "stdout_tail": node.artifacts.get("stdout_tail", "")[-_OUTPUT_CHARS:],
        "stderr_tail": node.artifacts.get("stderr_tail", "")[-_OUTPUT_CHARS:],
    }


def repair_messages(task: Task, node: Node, llm: object = None, max_tokens: int = 0) -> list[dict[str, str]]:
    """The prompt: the task, the crash with its traceback tail, the artifact, the edit rules;
    fitted to `llm`'s context window when it is given (the output tails shortened, then dropped)."""
    return fit_to(llm, repair_parts(task, node), max_tokens, strict=False).messages


def repair_parts(task: Task, node: Node) -> list[Part]:
    """The named parts of the repair prompt, in order, each with its drop rank."""
    goal = "maximize" if task.direction == "maximize" else "minimize"
    artifact = task.artifact
    frozen = f" {artifact.frozen_rule()}" if artifact.frozen_rule() else ""
    parts = [
        Part("system", artifact.system_rules(), role="system"),
        Part("task", f"# Task: {task.name}\n{task.description.strip() or f'Improve the {artifact.noun}.'}\n"
             f"Objective: {goal} the metric `{task.objective}`."),
        Part("crash", f"## Repair a crashed candidate\nThe {artifact.noun} below crashed during its "
             f"evaluation. Fix the cause of the crash with the smallest change that keeps the "
             f"candidate's idea.{frozen}\nThe candidate's idea: {node.motivation.strip()[:600] or 'n/a'}\n"
             f"Error:\n```text\n{(node.error or 'no error message')[:_ERROR_CHARS]}\n```"),
    ]
    for label, key, size in (("Traceback (last lines)", "traceback", _TRACEBACK_CHARS),
                             ("Standard error (last lines)", "stderr_tail", _OUTPUT_CHARS)):
        text = node.artifacts.get(key, "").strip()
        if text:
            short = f"{label}:\n```text\n{text[-400:]}\n```" if len(text[-size:]) > 400 else ""
            parts.append(Part(key, f"{label}:\n```text\n{text[-size:]}\n```", FEEDBACK, short=short))
    parts.append(Part("artifact", artifact.show(node.code)))
    parts.append(Part("rules", diff_rules(artifact)))
    return parts


class Debug(Stage):
    """Repairs crashed candidates with the LLM, up to `guard.repair_attempts` times each."""

    name = "debug"
    checkpoint = True  # a repaired candidate is persisted as a proposal before it is re-evaluated
    task_run_name = "debug-{label}"
    data = RepairData
    workers_like = "research"  # an LLM stage: as many calls at once as research makes

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.guard.repair_attempts > 0

    def skips(self, item: Item, ctx: RunView) -> bool:
        node = item.node
        return (node is None or classify_failure(node, ctx.task.artifact.names()) != CRASH
                or len(RepairData.peek(node).attempts) >= ctx.config.guard.repair_attempts)


    async def run(self, item: Item, ctx: RunView) -> StageResult:
        return await debug(item, ctx)


async def debug(item: Item, ctx: RunView) -> StageResult:
    """Send a crashed candidate back to the engineer repaired, or pass the item on unchanged."""
    assert item.node is not None
    crashed = item.node
    if (classify_failure(crashed, ctx.task.artifact.names()) != CRASH
            or len(RepairData.peek(crashed).attempts) >= ctx.config.guard.repair_attempts):
        return StageResult(crashed)
    node = crashed.copy()
    attempt = attempt_record(crashed)
    RepairData.of(node).attempts.append(attempt)
    messages = repair_messages(ctx.task, crashed, ctx.llm, ctx.config.llm.max_tokens)
    try:
        completion = await ask_llm(ctx, node, messages, priority=PROPOSE)
    except LLMError as exc:
        return _unrepaired(node, attempt, f"LLM call failed: {exc}")
    try:
        applied = ctx.task.artifact.apply(crashed.code, completion.text)
    except EditError as exc:
        return _unrepaired(node, attempt, f"unusable answer: {exc}")
    attempt["repair"] = applied.motivation.strip()[:500]
    _reset(node, applied.code, ctx.task.artifact.diff(item.parent.code, applied.code))
    return StageResult(node, to=_ENGINEER)


def _unrepaired(node: Node, attempt: dict[str, str], reason: str) -> StageResult:
    """The node stays failed, with the repair's failure after the crash's reason."""
    attempt["repair"] = f"failed: {reason}"
    node.error = f"{node.error}; repair failed: {reason}"
    return StageResult(node)


def _reset(node: Node, code: str, diff: str) -> None:
    """Make the node a fresh proposal of `code`; its costs (LLM, evaluation seconds) stay."""
    node.code, node.diff, node.status = code, diff, PROPOSED
    node.error = node.failed_stage = node.reason = node.evaluated_at = None
    node.score_pilot = node.score_full = node.score_partial = None
    node.speculative_at, node.cases_done = None, 0
    node.metrics, node.case_scores, node.artifacts = {}, {}, {}
