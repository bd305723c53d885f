"""Each (item, stage) as a Prefect task run, so the Prefect UI shows the pipeline live."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prefect import task
from prefect.cache_policies import NO_CACHE

from evoforge.infra.nodes import FAILED
from evoforge.stages.context import StageContext
from evoforge.stages.engineer import engineer
from evoforge.stages.item import FAILED_EVALUATION, FAILED_RESEARCH, Item
from evoforge.stages.research import new_candidate, research

log = logging.getLogger("evoforge.engine")

StageFn = Callable[[Item], Awaitable[Item]]


def _guarded(stage: str, fn: Callable[[Item, StageContext], Awaitable[Item]], ctx: StageContext,
             errors: list[str]) -> Callable[[Item], Awaitable[Item]]:
    """Run a stage; an unexpected error fails that node (recorded) instead of the whole run."""

    async def run(item: Item) -> Item:
        try:
            return await fn(item, ctx)
        except Exception as exc:
            log.error("internal error in %s stage:\n%s", stage, traceback.format_exc())
            errors.append(f"{stage}: {type(exc).__name__}: {exc}")
            node = item.node or new_candidate(item, ctx)
            item.node = node
            node.status, node.failed_stage = FAILED, stage
            node.error = f"internal error in the {stage} stage: {type(exc).__name__}: {exc}"
            item.outcome = FAILED_RESEARCH if stage == "research" else FAILED_EVALUATION
            return item

    return run


@dataclass
class StageTasks:
    """The research and engineer stages, wrapped as Prefect tasks bound to one run's context."""

    research: StageFn
    engineer: StageFn
    internal_errors: list[str]


def build_stage_tasks(ctx: StageContext, use_prefect: bool = True) -> StageTasks:
    """Stage callables for this run; with `use_prefect`, each call is a Prefect task run."""
    errors: list[str] = []
    run_research = _guarded("research", research, ctx, errors)
    run_engineer = _guarded("engineer", engineer, ctx, errors)
    if not use_prefect:
        return StageTasks(run_research, run_engineer, errors)

    options = dict(cache_policy=NO_CACHE, persist_result=False, retries=0)

    @task(name="research", task_run_name="research-{label}", **options)
    async def research_task(label: str, item: Item) -> Item:
        return await run_research(item)

    @task(name="engineer", task_run_name="evaluate-{label}", **options)
    async def engineer_task(label: str, item: Item) -> Item:
        return await run_engineer(item)

    async def research_call(item: Item) -> Item:
        return await research_task(f"from-{item.parent.id}", item)

    async def engineer_call(item: Item) -> Item:
        assert item.node is not None
        return await engineer_task(item.node.id, item)

    return StageTasks(research_call, engineer_call, errors)
