"""The sample stage: parent, inspirations and answer form for the next candidate."""

from __future__ import annotations

from evoforge.infra.nodes import Node
from evoforge.infra.prompt_format import FORMAT_DIFF, FORMAT_REWRITE
from evoforge.stages.context import StageContext
from evoforge.stages.item import Item


def pick_inspirations(ctx: StageContext, parent: Node) -> list[Node]:
    """The best node and random others, never the parent, at most `num_inspirations`."""
    want = ctx.config.search.num_inspirations
    pool = ctx.pool
    chosen: list[Node] = []
    if want and pool.best is not None and pool.best.id != parent.id:
        chosen.append(pool.best)
    others = [n for n in pool.nodes if n.id != parent.id and n not in chosen]
    if others and len(chosen) < want:
        chosen.extend(ctx.rng.sample(others, min(want - len(chosen), len(others))))
    return chosen


def answer_form(ctx: StageContext) -> str:
    mode = ctx.config.llm.answer_format
    if mode == "mixed":
        return FORMAT_DIFF if ctx.rng.random() < ctx.config.llm.diff_fraction else FORMAT_REWRITE
    return FORMAT_DIFF if mode == "diff" else FORMAT_REWRITE


def draw_item(ctx: StageContext) -> Item:
    """A new item designed against the current pool version."""
    parent = ctx.sampler.select_parent(ctx.pool, ctx.rng)
    return Item(
        v_i=ctx.pool.v,
        parent=parent,
        inspirations=pick_inspirations(ctx, parent),
        answer_format=answer_form(ctx),
    )
