"""Generator: ACE's first role. The parent playbook answers the next cases of the stream with the
task model; what it did there (its trajectories) is what the Reflector diagnoses.

The stream (`ace.mode`): offline, the train cases in order, `ace.batch` a step, starting again
after the last (`lap` 2, 3, ...); online, the val cases in order, each answered with the newest
playbook before anything is learned from it: the answers of the first lap are ACE's online
accuracy (stages/sinks/ace_online.py). Steps are numbered as items are drawn; a resumed run goes
on after the last step its evaluated nodes record.
"""

from __future__ import annotations

from evoforge.evaluators.task_model import channel_of
from evoforge.infra.failure_reasons import EVALUATION
from evoforge.infra.nodes import FAILED
from evoforge.stages.generate_data import GenerateData, StreamPosition
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult
from evoforge.stages.population.item import Item


class Generate(Stage):
    """Runs the parent playbook on the stream's next `ace.batch` cases."""

    name = "generate"
    task_run_name = "generate-{label}"
    data = GenerateData
    default_workers, max_workers = 8, 32  # task-model calls: sized like an LLM stage
    workers_like = "research"

    def __init__(self, position: StreamPosition | None = None) -> None:
        self.position = position or StreamPosition()

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        node = item.node.copy() if item.node is not None else new_candidate(item, ctx)
        channel = channel_of(ctx.task)
        mode, batch = ctx.config.ace.mode, ctx.config.ace.batch
        stream = channel.module.ids("train" if mode == "offline" else "val")
        step = self.position.take(GenerateData.peek(n).step for n in ctx.pool.nodes)
        start = step * batch
        cases = [stream[(start + i) % len(stream)] for i in range(batch)]
        outcome = await channel.evaluate(item.parent.code, cases)
        data = GenerateData.of(node)
        data.mode, data.step, data.lap, data.cases = mode, step, start // len(stream) + 1, cases
        data.scores = [outcome.case_scores.get(case, 0.0) for case in cases]
        data.task_model_calls = int(outcome.metrics.get("task_model_calls", 0))
        if not outcome.ok:
            node.status, node.failed_stage, node.error = FAILED, self.name, outcome.error
            node.reason = EVALUATION
            return StageResult(node, to=COMMIT)
        return StageResult(node)
