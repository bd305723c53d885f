"""A new candidate node for an item: its id, lineage and design version, nothing evaluated yet."""

from __future__ import annotations

from evoforge.infra.nodes import Node, new_node_id
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.research_data import ResearchData
from evoforge.stages.rounds.plan_data import PlanData


def new_candidate(item: Item, ctx: RunView) -> Node:
    """An empty node for the item's candidate, lineage filled in."""
    node = Node(
        id=new_node_id(),
        run_id=ctx.run_id,
        code="",
        parent_id=item.parent.id,
        island=item.parent.island,
        generation=item.parent.generation + 1,
        pool_version=item.v_i,
        backend=ctx.llm.name,
        model=ctx.llm.model,
    )
    ResearchData.of(node).inspiration_ids = [n.id for n in item.inspirations]
    if item.branch is not None:
        PlanData.of(node).branch = item.branch
    return node
