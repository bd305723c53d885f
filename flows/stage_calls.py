"""How the engine calls a stage: as a Prefect task run named after the item (so the Prefect UI
shows the pipeline live), or inline. Commit-side events (a speculative release, a settlement)
are task runs too, named after the node."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from prefect import Task, task
from prefect.utilities.annotations import opaque

from evoforge.infra.llm_traces import recording
from evoforge.infra.prefect_tasks import TASK_OPTIONS
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item


class StageCalls:
    """Runs stage plug-ins for the engine; with `use_prefect`, each run is a Prefect task run."""

    def __init__(self, ctx: StageContext, use_prefect: bool = True):
        self.ctx = ctx
        self.use_prefect = use_prefect
        self._tasks: dict[str, Task] = {}
        self._event_task = task(name="commit-event", task_run_name="{name}-{label}",
                                **TASK_OPTIONS)(_apply_event)

    def _task_of(self, stage: Stage) -> Task:
        if stage.name not in self._tasks:
            async def run_stage(label: str, item: Item, stage: Stage, ctx: StageContext) -> StageResult:
                return await stage.run(item, ctx)

            self._tasks[stage.name] = task(name=stage.name, task_run_name=stage.task_run_name,
                                           **TASK_OPTIONS)(run_stage)
        return self._tasks[stage.name]

    async def run(self, stage: Stage, item: Item) -> StageResult:
        """One run of `stage` on `item`; the LLM calls it made join the item's (`llm_calls`)."""
        with recording(stage.name) as calls:
            if not self.use_prefect or stage.task_run_name is None:
                result = await stage.run(item, self.ctx)
            else:  # opaque: Prefect takes the objects as they are, without walking into them
                result = await self._task_of(stage)(item.label, opaque(item), opaque(stage),
                                                    opaque(self.ctx))
        if not calls.calls:
            return result
        return replace(result, updates={**result.updates, "llm_calls": [*item.llm_calls, *calls.calls]})

    async def event(self, name: str | None, item: Item, apply: Callable[[Item], Any]) -> Any:
        """Apply a commit-side change; a named one is a task run `<name>-<node>`."""
        if name is None or not self.use_prefect:
            return apply(item)
        return await self._event_task(name, item.label, opaque(item), opaque(apply))


async def _apply_event(name: str, label: str, item: Item, apply: Callable[[Item], Any]) -> Any:
    return apply(item)
