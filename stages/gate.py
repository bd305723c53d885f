"""Gate: GEPA's check before a full validation. The child runs on its parent's minibatch (the
same cases, by the same task model) and goes on to the engineer only when it beats the parent
there; otherwise it is rejected with both scores, and remembered on its parent
(`RejectionMemory`) so the next prompt for that parent says it was tried."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evoforge.evaluators.task_model import channel_of
from evoforge.infra.failure_reasons import EVALUATION, GUARD
from evoforge.infra.node_data import NodeData
from evoforge.infra.nodes import FAILED, REJECTED
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.population.rejections import Rejections
from evoforge.stages.rollout import RolloutData
from evoforge.stages.sinks.base import Sink
from evoforge.stages.sinks.rejections_sink import RejectionMemory


@dataclass
class GateData(NodeData, owner="gate"):
    """The child's score on its parent's minibatch."""

    score: float | None = None
    task_model_calls: int = 0


class Gate(Stage):
    """Passes a child to full validation only when it beats its parent on the parent's minibatch."""

    name = "gate"
    task_run_name = "gate-{label}"
    data = GateData
    workers_like = "research"
    default_workers, max_workers = 8, 32

    def __init__(self, rejections: Rejections) -> None:
        self.rejections = rejections

    def sinks(self, ctx: RunView) -> Sequence[Sink]:
        return [RejectionMemory(self.rejections, self.name)]

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        assert item.node is not None
        node = item.node.copy()
        batch = RolloutData.peek(node)
        outcome = await channel_of(ctx.task).evaluate(node.code, batch.cases)
        data = GateData.of(node)
        data.score, data.task_model_calls = outcome.score, int(outcome.metrics.get("task_model_calls", 0))
        if not outcome.ok:
            node.status, node.failed_stage, node.error = FAILED, self.name, outcome.error
            node.reason = EVALUATION
            return StageResult(node, to=COMMIT)
        parent = batch.parent_score
        if parent is None or ctx.task.better(outcome.score, parent):
            return StageResult(node)
        # a check before the full validation stopped it: the guard bucket, not a duplicate
        node.status, node.failed_stage, node.reason = REJECTED, self.name, GUARD
        node.error = (f"gate: scored {outcome.score:.4g} on its parent's minibatch "
                      f"({', '.join(batch.cases)}), not above the parent's {parent:.4g}")
        return StageResult(node, to=COMMIT)
