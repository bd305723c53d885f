"""The draw at the entry stage: parent, inspirations and answer form for the next candidate
(the run's sampler chooses the parent; stages/sample/ holds the samplers)."""

from __future__ import annotations

from evoforge.infra.nodes import Node
from evoforge.infra.prompt_format import FORMAT_DIFF, FORMAT_REWRITE
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.rounds.branch_shares import branch_parent
from evoforge.stages.sample.inspirations import pick_inspirations


def answer_form(ctx: RunView) -> str:
    mode = ctx.config.llm.answer_format
    if mode == "mixed":
        return FORMAT_DIFF if ctx.rng.random() < ctx.config.llm.diff_fraction else FORMAT_REWRITE
    return FORMAT_DIFF if mode == "diff" else FORMAT_REWRITE


def choose_parent(ctx: RunView) -> tuple[Node, int]:
    """The parent, and the island its child lives on (the parent's, unless an island sampler says)."""
    return ctx.sampler.select_parent_and_island(ctx.pool, ctx.rng)


def draw_item(ctx: RunView) -> Item:
    """A new item designed against the current pool version (for the plan branch furthest behind
    its share, when a plan is on)."""
    branch = None
    if ctx.plan is not None:
        chosen = ctx.shares.pick(ctx.plan)
        ctx.shares.note(chosen.id)
        branch = chosen.id
        parent = branch_parent(chosen, ctx.pool, ctx.rng, ctx.config.search.exploitation)
        if parent is None:
            parent = ctx.pool.best_confirmed() or ctx.pool.best
        assert parent is not None, "the plan's first branch needs an evaluated seed"
        island = parent.island
    else:
        parent, island = choose_parent(ctx)
    item = Item(
        v_i=ctx.pool.v,
        parent=parent,
        branch=branch,
        inspirations=pick_inspirations(ctx.pool, ctx.sampler, parent, ctx.rng,
                                       ctx.config.search.num_inspirations),
        answer_format=answer_form(ctx),
    )
    if island != parent.island:  # a migrant parent, or the seed starting an empty island
        item.node = new_candidate(item, ctx)
        item.node.island = island
    return item
