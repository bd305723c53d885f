"""Researcher: ask the LLM for an improved candidate of the parent and turn the answer into code."""

from __future__ import annotations

import difflib
import time

from evoforge.infra.edits import apply_answer, parse_answer
from evoforge.infra.evolve_block import EditError
from evoforge.infra.llm.types import LLMError
from evoforge.infra.nodes import FAILED, PROPOSED, Node, new_node_id
from evoforge.stages.context import StageContext
from evoforge.stages.item import FAILED_RESEARCH, Item
from evoforge.stages.prompts import inspirations_used, research_messages, without_used_line


def unified_diff(old: str, new: str) -> str:
    """The change from parent to child as a unified diff."""
    return "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), "parent", "candidate", n=2)
    )


def new_candidate(item: Item, ctx: StageContext) -> Node:
    """An empty node for the item's candidate, lineage filled in."""
    return Node(
        id=new_node_id(),
        run_id=ctx.run_id,
        code="",
        parent_id=item.parent.id,
        inspiration_ids=[n.id for n in item.inspirations],
        island=item.parent.island,
        generation=item.parent.generation + 1,
        pool_version=item.v_i,
        backend=ctx.llm.name,
        model=ctx.llm.model,
    )


async def research(item: Item, ctx: StageContext) -> Item:
    """Fill `item.node` with a proposed candidate, or mark it failed with the reason."""
    node = item.node or new_candidate(item, ctx)
    item.node = node
    item.prompt = research_messages(ctx.task, item.parent, item.inspirations, item.answer_format)
    start = time.perf_counter()
    try:
        completion = await ctx.llm.complete(
            item.prompt, temperature=ctx.config.llm.temperature, max_tokens=ctx.config.llm.max_tokens
        )
    except LLMError as exc:
        node.llm_s = time.perf_counter() - start
        return _fail(item, f"LLM call failed: {exc}")
    node.llm_s = completion.seconds
    node.tokens_in, node.tokens_out = completion.tokens_in, completion.tokens_out
    node.backend, node.model = completion.backend, completion.model
    item.answer = completion.text
    try:
        parsed = parse_answer(completion.text)
        code = apply_answer(item.parent.code, parsed)
    except EditError as exc:
        node.motivation = completion.text.strip()[:500]
        return _fail(item, f"unusable answer: {exc}")
    node.code = code
    node.motivation = without_used_line(parsed.motivation)
    node.inspirations_used = inspirations_used(completion.text, item.inspirations)
    node.diff = unified_diff(item.parent.code, code)
    node.status = PROPOSED
    return item


def _fail(item: Item, reason: str) -> Item:
    assert item.node is not None
    item.node.status = FAILED
    item.node.failed_stage = "research"
    item.node.error = reason
    item.outcome = FAILED_RESEARCH
    return item
