"""How the engine calls a stage: inline on the flow's event loop (the default), or as a Prefect
task run named after the item (`engine.task_runs: stages`), so the Prefect UI shows every item's
way through the pipeline, at ~5 ms of CPU per task run. Evaluations are task runs either way
(stages/evaluation/prefect_tasks.py). The LLM calls a stage run makes are collected for the
item (its MLflow traces)."""

from __future__ import annotations

from dataclasses import replace

from prefect import Task, task
from prefect.utilities.annotations import opaque

from evoforge.infra.llm_traces import recording
from evoforge.infra.prefect_tasks import TASK_OPTIONS
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item, ItemUpdate


class StageCalls:
    """Runs stage plug-ins for the engine; with `task_runs`, each run is a Prefect task run."""

    def __init__(self, ctx: RunView, task_runs: bool = False):
        self.ctx = ctx
        self.task_runs = task_runs
        self._tasks: dict[str, Task] = {}

    def _task_of(self, stage: Stage) -> Task:
        if stage.name not in self._tasks:
            async def run_stage(label: str, item: Item, stage: Stage, ctx: RunView) -> StageResult:
                return await stage.run(item, ctx)

            self._tasks[stage.name] = task(name=stage.name, task_run_name=stage.task_run_name,
                                           **TASK_OPTIONS)(run_stage)
        return self._tasks[stage.name]

    async def run(self, stage: Stage, item: Item) -> StageResult:
        """One run of `stage` on `item`; the LLM calls it made join the item's (`llm_calls`)."""
        with recording(stage.name) as calls:
            if not self.task_runs or stage.task_run_name is None:
                result = await stage.run(item, self.ctx)
            else:  # opaque: Prefect takes the objects as they are, without walking into them
                result = await self._task_of(stage)(item.label, opaque(item), opaque(stage),
                                                    opaque(self.ctx))
        if not calls.calls:
            return result
        update = result.updates if result.updates is not None else ItemUpdate()
        return replace(result, updates=replace(update, llm_calls=[*item.llm_calls, *calls.calls]))
