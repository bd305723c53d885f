"""Promote: a pooled candidate's `full`-level evaluation, as a stage of the pipeline.

When a promotion round is due (flows/promotion_flow.py), the top-K pilot candidates
(`promotion_candidates`) become items of this stage (`promotion_items`), which enter the engine
through its door for items the entry stage did not draw. A worker of this stage's pool
(`engine.workers.promote`, else as many as the engineer's) evaluates the candidate at `full` with
its best knob values on the run's evaluation runner and slots, like every other evaluation, and
sends the item to the head, which rescores the pooled node in place (a promotion, not a new
evaluation) and, with the round's last item, records the round (stages/rounds/promotion.py).
A side stage: no item of the main line ever comes here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextvars import copy_context
from dataclasses import replace

from evoforge.infra.nodes import Node
from evoforge.stages.pipeline.requests import request_for
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult
from evoforge.stages.population.item import Item, ItemUpdate
from evoforge.stages.rounds.promotion import PROMOTE, PromotionTicket, promote


def promotion_items(nodes: Sequence[Node], round_no: int, v: int) -> list[Item]:
    """One item per candidate of promotion round `round_no` (pool version `v`), in rank order;
    their evaluations run in the caller's context (the round's Prefect subflow)."""
    here = copy_context()
    return [Item(v_i=v, parent=node, node=node.copy(),
                 owned={PROMOTE: PromotionTicket(round_no, i, len(nodes), here)})
            for i, node in enumerate(nodes)]


def ticket_of(item: Item) -> PromotionTicket | None:
    """The item's promotion ticket; None for an item of the main line."""
    ticket = item.owned.get(PROMOTE)
    return ticket if isinstance(ticket, PromotionTicket) else None


class Promote(Stage):
    """Evaluates a promotion round's candidate at `full`; the head folds the score in."""

    name = PROMOTE
    then = COMMIT
    workers_like = "engineer"  # its evaluations share the engineer's slots
    default_workers = 2
    max_workers = 4

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        ticket = ticket_of(item)
        assert ticket is not None and item.node is not None, "the promote stage takes promotion items only"
        node = item.node.copy()
        job = promote(node, ctx.evaluations, request_for(node, ctx, node.params))
        result = await asyncio.get_running_loop().create_task(job, context=ticket.context)
        done = ItemUpdate(owned={PROMOTE: replace(ticket, result=result)})
        return StageResult(node, to=COMMIT, updates=done)
