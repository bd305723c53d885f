"""Curator: ACE's third role. The proposer, shown the parent playbook, the failed cases' feedback
and the Reflector's insight, answers with delta operations (the playbook kind's ADD / UPDATE /
REMOVE / TAG); then the Reflector's bullet tags are merged onto the result as counters,
deterministically (a tag naming a bullet the curator removed is dropped), so each step refines
the context item by item and records which bullets served.

Steps run at once, so the playbook a step was generated on may no longer be the newest when its
curator answers. The delta is then merged onto the newest playbook of the pool instead (ACE's
batched deltas: operations name bullets by id, so they apply to any version that still has those
bullets); the node's parent becomes that playbook (`CuratorData.rebased_from` keeps the one it
was generated on). When the operations do not apply there (a bullet they name was removed), the
delta stays on its own parent."""

from __future__ import annotations

from dataclasses import dataclass, replace

from evoforge.infra.artifacts.playbook import tag_bullets
from evoforge.infra.evolve_block import EditError
from evoforge.infra.node_data import NodeData
from evoforge.infra.nodes import PROPOSED, Node
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.reflector import ReflectorData
from evoforge.stages.research import Research, research


@dataclass
class CuratorData(NodeData, owner="curator"):
    """How many of the Reflector's tags reached the curated playbook."""

    tags_merged: int = 0
    tags_dropped: int = 0
    rebased_from: str | None = None  # the parent it was generated on, when merged onto a newer one


class Curator(Research):
    """research with the playbook kind's delta operations, then the Reflector's tags merged."""

    name = "curator"
    task_run_name = "curator-{label}"
    data = CuratorData
    workers_like = "research"

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        result = await research(item, ctx)
        node, reflected = result.node, ReflectorData.peek(result.node)
        if node.failed_stage == "research":
            node.failed_stage = self.name
        node.llm_s += reflected.llm_s  # the Reflector's call, charged to the candidate too
        node.tokens_in += reflected.tokens_in
        node.tokens_out += reflected.tokens_out
        if node.status != PROPOSED:
            return result
        data = CuratorData.of(node)
        base = item.parent
        newest = ctx.pool.nodes[-1] if ctx.pool.nodes else base
        rebased = _applied_on(newest, result.updates.answer, ctx) if newest.id != base.id else None
        if rebased is not None:  # as reflection re-bases an item (stages/reflect.py): a new parent
            node.code = rebased
            data.rebased_from, node.parent_id, node.pool_version = base.id, newest.id, ctx.pool.v
            base = newest
            result = replace(result, updates=replace(result.updates, parent=newest, v_i=ctx.pool.v,
                                                     tainted_by=None))
        if reflected.tags:
            node.code, merged = tag_bullets(node.code, [(i, t) for i, t in reflected.tags])
            data.tags_merged, data.tags_dropped = merged, len(reflected.tags) - merged
        node.diff = ctx.task.artifact.diff(base.code, node.code)
        return result


def _applied_on(newest: Node, answer: object, ctx: RunView) -> str | None:
    """The curator's answer applied to the newest playbook, or None when it does not apply there
    (then the delta stays on the playbook it was generated on)."""
    if not isinstance(answer, str):
        return None
    try:
        return ctx.task.artifact.apply(newest.code, answer).code
    except EditError:
        return None
