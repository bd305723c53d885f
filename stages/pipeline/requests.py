"""The evaluation job of a candidate, as the engineer, param search and promotion hand it to the
run's evaluation runner: snapshots of what it needs, nothing shared."""

from __future__ import annotations

from typing import Any

from evoforge.infra.nodes import Node
from evoforge.stages.evaluation.job import EvalRequest, SpeculationRequest
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.speculation import Reference


def request_for(node: Node, ctx: RunView, params: dict[str, Any] | None = None) -> EvalRequest:
    """The evaluation job of `node` at the task's search level (with `params` for its knobs):
    snapshots of what it needs, nothing shared."""
    order, spec = None, None
    if ctx.task.case_based:
        assert ctx.case_order is not None
        order = tuple(ctx.case_order.order)
        cfg = ctx.config.speculation
        if cfg.alpha_spec is not None and ctx.release is not None:
            spec = SpeculationRequest(cfg.alpha_spec, cfg.prune, Reference.of(ctx.pool))
    quick_test = ctx.config.guard.quick_test and ctx.task.quick_test is not None
    return EvalRequest(node_id=node.id, code=node.code, task=ctx.task, limits=ctx.limits,
                       scratch=ctx.scratch, level=ctx.task.search_level, order=order,
                       speculation=spec, quick_test=quick_test, params=params or None)
