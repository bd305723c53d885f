"""Engineer: check a proposed candidate, then evaluate it in the sandbox (case by case, with
speculative completion, when the task exposes validation cases)."""

from __future__ import annotations

import time

from evoforge.evaluators.cases import evaluate_cases
from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.infra.nodes import EVALUATED, FAILED, PRUNED, Node
from evoforge.stages.context import StageContext
from evoforge.stages.item import ACCEPTED, FAILED_EVALUATION, PRUNED_EARLY, REJECTED_DUPLICATE, Item
from evoforge.stages.novelty import novelty_rejection
from evoforge.stages.speculation import Speculation


def _record(node: Node, outcome: EvalOutcome) -> None:
    """What every evaluation leaves on its node: cost, metrics, artifacts, output tails."""
    node.eval_s = outcome.seconds
    node.metrics, node.artifacts = dict(outcome.metrics), dict(outcome.artifacts)
    if outcome.stdout_tail:
        node.artifacts.setdefault("stdout_tail", outcome.stdout_tail[-4000:])
    if outcome.stderr_tail:
        node.artifacts.setdefault("stderr_tail", outcome.stderr_tail[-4000:])


def _finish(item: Item, outcome: EvalOutcome) -> Item:
    node = item.node
    assert node is not None
    node.evaluated_at = time.time()
    if outcome.ok:
        node.score_full, node.status = outcome.score, EVALUATED
        item.outcome = ACCEPTED
    else:
        node.status, node.failed_stage, node.error = FAILED, "engineer", outcome.error
        item.outcome = FAILED_EVALUATION
    return item


async def _evaluate_cases(item: Item, ctx: StageContext) -> Item:
    node = item.node
    assert node is not None and ctx.case_order is not None
    order = ctx.case_order.order
    spec_cfg = ctx.config.speculation
    spec = None
    if spec_cfg.alpha_spec is not None and ctx.release is not None and ctx.pool.best is not None:
        release = ctx.release
        spec = Speculation(node, ctx.pool, spec_cfg.alpha_spec, len(order), spec_cfg.prune,
                           release=lambda: release(item))
    outcome = await evaluate_cases(ctx.task, node.code, order,
                                   on_case=spec.on_case if spec else None,
                                   limits=ctx.limits, scratch_root=ctx.scratch)
    _record(node, outcome)
    node.case_scores, node.cases_done = dict(outcome.case_scores), outcome.cases_done
    if spec is not None and spec.pruned and outcome.error is None:
        node.evaluated_at = time.time()
        node.status, item.outcome = PRUNED, PRUNED_EARLY
        node.artifacts["pruned"] = (f"prefix of {outcome.cases_done}/{outcome.cases_total} cases "
                                    f"scored {node.score_partial:.6g}: cannot beat the pool's best")
        return item
    return _finish(item, outcome)


async def engineer(item: Item, ctx: StageContext) -> Item:
    """Evaluate `item.node` and record its scores, or the reason it failed."""
    node = item.node
    assert node is not None
    reason = novelty_rejection(node.code, ctx.pool, ctx.config.search)
    if reason is not None:
        node.status, node.failed_stage = FAILED, "engineer"
        node.error = f"rejected before evaluation: {reason}"
        item.outcome = REJECTED_DUPLICATE
        return item
    if ctx.task.case_based:
        return await _evaluate_cases(item, ctx)
    outcome = await evaluate_program(ctx.task, node.code, stage="full", limits=ctx.limits,
                                     scratch_root=ctx.scratch)
    _record(node, outcome)
    return _finish(item, outcome)
