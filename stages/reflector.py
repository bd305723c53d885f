"""Reflector: ACE's second role. An LLM reads the generator's trajectories (each case's input,
the parent playbook's output, its score and feedback) and says what went wrong, the insight the
curator should act on, and which bullets helped or harmed (infra/ace_format.py).

The insight goes to the curator with the failed cases' feedback; the bullet tags are merged onto
the curated playbook as counters (stages/curator.py). An answer that is not such a reflection
fails the candidate with the reason; the run goes on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from evoforge.evaluators.task_model import channel_of
from evoforge.infra.ace_format import CASE_PREFIX, PLAYBOOK_HEADER, REFLECTOR_MARKER, parse_reflection
from evoforge.infra.evolve_block import EditError
from evoforge.infra.failure_reasons import answer_head
from evoforge.infra.llm.scheduler import REFLECT
from evoforge.infra.llm.types import LLMError
from evoforge.infra.node_data import NodeData
from evoforge.infra.nodes import FAILED, Node
from evoforge.stages.generate_data import GenerateData
from evoforge.stages.pipeline.llm_call import ask_llm
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult
from evoforge.stages.population.item import Item, ItemUpdate
from evoforge.stages.prompt_fit import FEEDBACK, Part, fit_to

log = logging.getLogger("evoforge.reflector")

INSIGHT_PREFIX = "Reflector's insight:"
_OUTPUT_CHARS, _INPUT_CHARS = 600, 400


@dataclass
class ReflectorData(NodeData, owner="reflector"):
    """The Reflector's conclusions on a candidate's trajectories, and what its call cost."""

    insight: str = ""
    diagnosis: str = ""
    tags: list[list[str]] = field(default_factory=list)  # [bullet id, helpful|harmful]
    llm_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0


class Reflector(Stage):
    """Asks the LLM to diagnose the generator's trajectories and tag the bullets they used."""

    name = "reflector"
    task_run_name = "reflector-{label}"
    data = ReflectorData
    default_workers, max_workers = 8, 32
    workers_like = "research"

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        assert item.node is not None
        node = item.node.copy()
        messages = [{"role": "user", "content": reflector_prompt(item.parent.code, node, ctx)}]
        data = ReflectorData.of(node)
        probe = Node(id=node.id, run_id=node.run_id, code="")  # the call's own meters
        try:
            completion = await ask_llm(ctx, probe, messages, priority=REFLECT)
        except LLMError as exc:
            return _fail(node, f"reflector: LLM call failed: {exc}", exc.reason, probe, data)
        data.llm_s, data.tokens_in, data.tokens_out = probe.llm_s, probe.tokens_in, probe.tokens_out
        try:
            reflection = parse_reflection(completion.text)
        except EditError as exc:
            log.info("reflector on %s: unusable answer (%s): %s; the answer begins: %r", node.id, exc.reason,
                     exc, answer_head(completion.text))
            return _fail(node, f"reflector: unusable answer: {exc}", exc.reason, probe, data)
        data.insight, data.diagnosis = reflection.insight, reflection.diagnosis
        data.tags = [list(tag) for tag in reflection.tags]
        feedback = _failed_feedback(item.parent.code, node, ctx) + [f"{INSIGHT_PREFIX} {reflection.insight}"]
        return StageResult(node, updates=ItemUpdate(feedback="\n".join(feedback)))


def reflector_prompt(playbook: str, node: Node, ctx: RunView) -> str:
    """The Reflector's prompt: the playbook, then each trajectory of the generator's step, fitted
    to the LLM's context window (the last trajectories are left out first)."""
    channel = channel_of(ctx.task)
    parts = [Part("rules", REFLECTOR_MARKER + "\n"
                  "Below are a playbook (an assistant's itemised context) and how the assistant did with it "
                  "on some cases. Diagnose what went wrong, state the one insight that would fix it, and "
                  "tag each bullet the answers relied on as helpful, harmful or neutral. Answer with one "
                  'JSON object: {"error_identification": "...", "root_cause_analysis": "...", '
                  '"key_insight": "...", "bullet_tags": [{"id": "<bullet id>", "tag": "helpful" | '
                  '"harmful" | "neutral"}]}.'),
             Part("playbook", f"{PLAYBOOK_HEADER}\n{playbook.rstrip()}")]
    for case_id in GenerateData.peek(node).cases:
        case = {k: v for k, v in channel.module.by_id[case_id].items() if k != "id"}
        traced = channel.trace(playbook, case_id)
        output, score, note = traced if traced is not None else ("(the call failed)", 0.0, "")
        parts.append(Part(f"case {case_id}",
                          f"{CASE_PREFIX}{case_id}\nInput: {_inputs(case)[:_INPUT_CHARS]}\n"
                          f"Output: {' '.join(output.split())[:_OUTPUT_CHARS]}\nScore: {score:g}\n"
                          f"Feedback: {note or '(none)'}", FEEDBACK))
    fitted = fit_to(ctx.llm, parts, ctx.config.llm.max_tokens, strict=False)
    return fitted.messages[0]["content"] + "\n"


def _inputs(case: dict) -> str:
    """The case as the prompt shows it: its question when it has one, else its fields."""
    for key in ("question", "input", "prompt", "query"):
        if isinstance(case.get(key), str):
            return case[key]
    return json.dumps(case, default=str)


def _failed_feedback(playbook: str, node: Node, ctx: RunView) -> list[str]:
    channel = channel_of(ctx.task)
    lines = []
    for case_id in GenerateData.peek(node).cases:
        traced = channel.trace(playbook, case_id)
        if traced is not None and traced[2]:
            lines.append(f"[{case_id}] {traced[2]}")
    return lines


def _fail(node: Node, error: str, reason: str, probe: Node, data: ReflectorData) -> StageResult:
    """The node failed in the reflector: `error` says what happened, `reason` is its bucket."""
    data.llm_s, data.tokens_in, data.tokens_out = probe.llm_s, probe.tokens_in, probe.tokens_out
    node.llm_s += probe.llm_s
    node.tokens_in += probe.tokens_in
    node.tokens_out += probe.tokens_out
    node.status, node.failed_stage, node.error, node.reason = FAILED, "reflector", error, reason
    return StageResult(node, to=COMMIT)
