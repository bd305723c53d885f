"""Engineer: check a proposed candidate, then evaluate it in the sandbox."""

from __future__ import annotations

import time

from evoforge.evaluators.evaluation import evaluate_program
from evoforge.infra.nodes import EVALUATED, FAILED
from evoforge.stages.context import StageContext
from evoforge.stages.item import ACCEPTED, FAILED_EVALUATION, REJECTED_DUPLICATE, Item


async def engineer(item: Item, ctx: StageContext) -> Item:
    """Evaluate `item.node` and record its scores, or the reason it failed."""
    node = item.node
    assert node is not None
    if ctx.pool.is_duplicate(node.code):
        node.status, node.failed_stage = FAILED, "engineer"
        node.error = "rejected before evaluation: duplicate of a program already in this run"
        item.outcome = REJECTED_DUPLICATE
        return item
    outcome = await evaluate_program(ctx.task, node.code, stage="full", limits=ctx.limits,
                                     scratch_root=ctx.scratch)
    node.eval_s = outcome.seconds
    node.evaluated_at = time.time()
    node.metrics = dict(outcome.metrics)
    node.artifacts = dict(outcome.artifacts)
    if outcome.stdout_tail:
        node.artifacts.setdefault("stdout_tail", outcome.stdout_tail[-4000:])
    if outcome.stderr_tail:
        node.artifacts.setdefault("stderr_tail", outcome.stderr_tail[-4000:])
    if outcome.ok:
        node.score_full = outcome.score
        node.status = EVALUATED
        item.outcome = ACCEPTED
    else:
        node.status, node.failed_stage, node.error = FAILED, "engineer", outcome.error
        item.outcome = FAILED_EVALUATION
    return item
