"""Researcher: ask the LLM for an improved candidate of the parent and turn the answer into code.

The research stage plug-in: LLM calls, as many at once as `engine.workers.research`; each
proposal is checkpointed (persisted before evaluation) and handed on to the engineer."""

from __future__ import annotations

import logging
import time

from evoforge.infra.config import RunConfig
from evoforge.infra.evolve_block import EditError
from evoforge.infra.failure_reasons import PROMPT_TOO_LONG, answer_head
from evoforge.infra.llm.factory import prefetch
from evoforge.infra.llm.scheduler import PROPOSE, asking
from evoforge.infra.llm.types import LLMError
from evoforge.infra.llm_traces import trace_call
from evoforge.infra.nodes import FAILED, PROPOSED, Node
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult, WorkerBounds
from evoforge.stages.population.item import Item, ItemUpdate
from evoforge.stages.prompt_fit import PromptTooLarge, fit_to
from evoforge.stages.research_data import ResearchData
from evoforge.stages.research_prompt import (
    ideas_used,
    inspirations_used,
    origin_of,
    research_parts,
    shown,
    without_used_line,
)
from evoforge.stages.rounds.branches import Branch
from evoforge.stages.tuning.param_space import SpaceError, parse_space

log = logging.getLogger("evoforge.research")


class Research(Stage):
    """Asks the LLM for one improved candidate of the item's parent."""

    name = "research"
    checkpoint = True
    task_run_name = "research-{label}"
    default_workers, max_workers = 8, 32  # LLM calls at once (engine.workers.research)

    def workers(self, cfg: RunConfig) -> WorkerBounds:
        """The configured workers, plus the proposals prepared beyond the LLM scheduler's slots
        (`scheduler.prefetch`): they wait for a slot, so that none idles between two calls."""
        bounds, extra = super().workers(cfg), prefetch(cfg)
        return WorkerBounds(bounds.initial + extra, bounds.low, bounds.high + extra) if extra else bounds

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        return await research(item, ctx)


def branch_of(item: Item, ctx: RunView) -> Branch | None:
    """The plan branch the item was drawn for, as the current plan states it."""
    if item.branch is None or ctx.plan is None:
        return None
    return next((b for b in ctx.plan.slots if b.id == item.branch), None)


def declares_knobs(node: Node) -> bool:
    """True when the node's program declares at least one knob."""
    try:
        return bool(parse_space(node.code))
    except SpaceError:
        return False


async def research(item: Item, ctx: RunView) -> StageResult:
    """A proposed candidate for `item`, or a failed one with the reason (sent to the commit)."""
    node = item.node.copy() if item.node is not None else new_candidate(item, ctx)
    parts = research_parts(ctx.task, item.parent, item.inspirations, item.answer_format,
                           item.knowledge, branch=branch_of(item, ctx),
                           knobs=ctx.config.param_search.enabled and declares_knobs(item.parent),
                           feedback=item.feedback)
    try:  # sized to the endpoint's context window: the least needed parts left out
        fitted = fit_to(ctx.llm, parts, ctx.config.llm.max_tokens)
    except PromptTooLarge as exc:
        return _fail(node, f"prompt too large: {exc}", PROMPT_TOO_LONG, ItemUpdate())
    prompt, ResearchData.of(node).prompt_dropped = fitted.messages, fitted.dropped
    inspirations = shown(item.inspirations, fitted.dropped, "inspiration ")
    knowledge = shown(item.knowledge, fitted.dropped, "knowledge K")
    started_at, start = time.time(), time.perf_counter()
    try:
        with asking(PROPOSE):  # proposals take the scheduler's next free slot first
            completion = await ctx.llm.complete(
                prompt, temperature=ctx.config.llm.temperature, max_tokens=ctx.config.llm.max_tokens
            )
    except LLMError as exc:
        node.llm_s = time.perf_counter() - start
        node.model = exc.model or node.model  # a router names the model the call went to
        node.tokens_in, node.tokens_out = exc.tokens_in, exc.tokens_out  # a cut-off answer's usage
        trace_call(ctx.llm, prompt, started_at, node.llm_s, error=str(exc))
        return _fail(node, f"LLM call failed: {exc}", exc.reason, ItemUpdate(prompt=prompt))
    trace_call(ctx.llm, prompt, started_at, completion.seconds, completion)
    node.llm_s = completion.seconds
    node.tokens_in, node.tokens_out = completion.tokens_in, completion.tokens_out
    node.backend, node.model = completion.backend, completion.model
    updates = ItemUpdate(prompt=prompt, answer=completion.text)
    try:
        applied = ctx.task.artifact.apply(item.parent.code, completion.text)
    except EditError as exc:
        node.motivation = completion.text.strip()[:500]
        log.info("research on %s (parent %s): unusable answer (%s): %s; the answer begins: %r", node.id,
                 item.parent.id, exc.reason, exc, answer_head(completion.text))
        return _fail(node, f"unusable answer: {exc}", exc.reason, updates)
    node.code = code = applied.code
    node.motivation = without_used_line(applied.motivation)
    used = ResearchData.of(node)
    used.inspirations_used = inspirations_used(completion.text, inspirations)
    used.ideas_used = ideas_used(completion.text, knowledge)
    node.origin = origin_of(used.ideas_used, knowledge, used.inspirations_used)
    node.diff = ctx.task.artifact.diff(item.parent.code, code)
    node.status = PROPOSED
    return StageResult(node, updates=updates)


def _fail(node: Node, error: str, reason: str, updates: ItemUpdate) -> StageResult:
    """The node failed in research: `error` says what happened, `reason` is its bucket."""
    node.status, node.failed_stage, node.error, node.reason = FAILED, "research", error, reason
    return StageResult(node, to=COMMIT, updates=updates)
