"""A new candidate node for an item: its id, lineage and design version, nothing evaluated yet."""

from __future__ import annotations

from evoforge.infra.nodes import Node, new_node_id
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.population.item import Item


def new_candidate(item: Item, ctx: StageContext) -> Node:
    """An empty node for the item's candidate, lineage filled in."""
    return Node(
        id=new_node_id(),
        run_id=ctx.run_id,
        code="",
        parent_id=item.parent.id,
        inspiration_ids=[n.id for n in item.inspirations],
        island=item.parent.island,
        branch=item.branch,
        generation=item.parent.generation + 1,
        pool_version=item.v_i,
        backend=ctx.llm.name,
        model=ctx.llm.model,
    )
