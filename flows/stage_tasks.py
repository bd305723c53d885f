"""Each (item, stage) as a Prefect task run, so the Prefect UI shows the pipeline live."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from evoforge.infra.nodes import FAILED
from evoforge.stages.context import StageContext
from evoforge.stages.engineer import engineer
from evoforge.stages.item import FAILED_EVALUATION, FAILED_RESEARCH, Item
from evoforge.stages.reflect import reflect
from evoforge.stages.research import new_candidate, research

log = logging.getLogger("evoforge.engine")

StageFn = Callable[[Item], Awaitable[Item]]
EventFn = Callable[[str | None, Item, Callable[[Item], Any]], Awaitable[Any]]
_OPTIONS: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False, "retries": 0}


def _guarded(stage: str, fn: Callable[[Item, StageContext], Awaitable[Item]], ctx: StageContext,
             errors: list[str]) -> StageFn:
    """Run a stage; an unexpected error fails that node (recorded) instead of the whole run."""

    async def run(item: Item) -> Item:
        try:
            return await fn(item, ctx)
        except Exception as exc:  # noqa: BLE001 - recorded on the node and in run.log
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
    """The stages bound to one run's context, as Prefect tasks (or plain calls)."""

    research: StageFn
    engineer: StageFn
    reflect: StageFn
    event: EventFn  # a named commit-side event (speculative release, settlement) as a task run
    internal_errors: list[str]


def _label(item: Item) -> str:
    return item.node.id if item.node is not None else f"from-{item.parent.id}"


def build_stage_tasks(ctx: StageContext, use_prefect: bool = True) -> StageTasks:
    """Stage callables for this run; with `use_prefect`, each call is a Prefect task run."""
    errors: list[str] = []
    run_research = _guarded("research", research, ctx, errors)
    run_engineer = _guarded("engineer", engineer, ctx, errors)
    run_reflect = _guarded("reflect", lambda item, c: reflect(item, c, c.history), ctx, errors)

    async def plain_event(name: str | None, item: Item, fn: Callable[[Item], Any]) -> Any:
        return fn(item)

    if not use_prefect:
        return StageTasks(run_research, run_engineer, run_reflect, plain_event, errors)

    @task(name="research", task_run_name="research-{label}", **_OPTIONS)
    async def research_task(label: str, item: Item) -> Item:
        return await run_research(item)

    @task(name="engineer", task_run_name="evaluate-{label}", **_OPTIONS)
    async def engineer_task(label: str, item: Item) -> Item:
        return await run_engineer(item)

    @task(name="reflect", task_run_name="reflect-{label}", **_OPTIONS)
    async def reflect_task(label: str, item: Item) -> Item:
        return await run_reflect(item)

    @task(name="commit-event", task_run_name="{name}-{label}", **_OPTIONS)
    async def event_task(name: str, label: str, item: Item, fn: Callable[[Item], Any]) -> Any:
        return fn(item)

    async def event(name: str | None, item: Item, fn: Callable[[Item], Any]) -> Any:
        if name is None:
            return fn(item)
        return await event_task(name, _label(item), item, fn)

    return StageTasks(
        research=lambda item: research_task(_label(item), item),
        engineer=lambda item: engineer_task(_label(item), item),
        reflect=lambda item: reflect_task(_label(item), item),
        event=event,
        internal_errors=errors,
    )
