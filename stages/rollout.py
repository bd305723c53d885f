"""Rollout: GEPA's first step. Run the parent on a minibatch of train cases with the task model
and hand the proposer what went wrong there (and the proposals already rejected on this parent).

The minibatch (`gepa.minibatch` train cases, drawn with the run's seeded rng) is kept on the
candidate's node (`RolloutData`), so the gate (stages/gate.py) scores the child on the same
cases. The parent's outputs are cached by the task model's channel: a parent drawn again pays
only for cases it has not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.evaluators.task_model import FEEDBACK_ARTIFACT, channel_of
from evoforge.infra.failure_reasons import EVALUATION
from evoforge.infra.node_data import NodeData
from evoforge.infra.nodes import FAILED
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult
from evoforge.stages.population.item import Item, ItemUpdate
from evoforge.stages.population.rejections import Rejections

TRIED_HEADER = "Proposals already tried on this parent that did not beat it (do not propose them again):"


@dataclass
class RolloutData(NodeData, owner="rollout"):
    """The minibatch a candidate was designed on, and its parent's result there."""

    cases: list[str] = field(default_factory=list)
    parent_score: float | None = None
    task_model_calls: int = 0


class Rollout(Stage):
    """Scores the parent on a train minibatch and shows the proposer that minibatch's feedback."""

    name = "rollout"
    task_run_name = "rollout-{label}"
    data = RolloutData
    default_workers, max_workers = 8, 32  # task-model calls: sized like an LLM stage
    workers_like = "research"

    def __init__(self, rejections: Rejections) -> None:
        self.rejections = rejections

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        node = item.node.copy() if item.node is not None else new_candidate(item, ctx)
        channel = channel_of(ctx.task)
        pool = channel.module.ids("train") or channel.module.ids("val")
        cases = ctx.rng.sample(pool, min(ctx.config.gepa.minibatch, len(pool)))
        outcome = await channel.evaluate(item.parent.code, cases)
        data = RolloutData.of(node)
        data.cases, data.parent_score = cases, outcome.score
        data.task_model_calls = int(outcome.metrics.get("task_model_calls", 0))
        if not outcome.ok:
            node.status, node.failed_stage, node.error = FAILED, self.name, outcome.error
            node.reason = EVALUATION
            return StageResult(node, to=COMMIT)
        passed = f"The parent passed every check of its {len(cases)} minibatch cases ({outcome.score:.3g})."
        shown = [outcome.artifacts.get(FEEDBACK_ARTIFACT) or passed]
        tried = self.rejections.tried(item.parent.id)
        if tried:
            shown.append("\n".join([TRIED_HEADER, *(f"- {text}" for text in tried)]))
        return StageResult(node, updates=ItemUpdate(feedback="\n".join(shown)))
