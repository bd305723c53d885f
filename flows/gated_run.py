"""What a run adds for gated ML work: the first research plan, the round jobs (plan agent,
promotion) beside the pipeline, and the end of the search (a last promotion; the final report
that follows it is flows/final_report.py). The round jobs' work reaches the head through the
engine's door (flows/run_door.py): a promotion round's candidates go through the engine's
`promote` stage pool, the last promotion's too (`Engine.finish`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from evoforge.cognition.seeding import task_seeds
from evoforge.flows.engine import Engine
from evoforge.flows.promotion_flow import promotion_flow, promotion_job
from evoforge.flows.session import Session
from evoforge.stages.rounds.plan_job import plan_enabled, plan_job, start_plan
from evoforge.stages.rounds.promotion import promotion_candidates
from evoforge.stages.rounds.schedule import RoundJob, round_size, run_rounds

log = logging.getLogger("evoforge.gated")

HYPOTHESIS_TAG = "hypothesis"  # cognition priors with this tag seed the first plan's branches


def _hypotheses(session: Session) -> list[str]:
    task = session.ctx.task
    items = task_seeds(task.root, task.name)
    return [i.title for i in items if HYPOTHESIS_TAG in i.tags]


def round_jobs(engine: Engine, session: Session) -> list[Callable[[], Awaitable[Any]]]:
    """The background round jobs of this run (none for a plain task)."""
    ctx, door = session.ctx, engine.door
    jobs: list[RoundJob] = []
    fresh = _hypotheses(session)
    slots = ctx.config.plan.slots
    planning = plan_enabled(ctx.task, ctx.config)
    if planning:
        seeds, fresh = fresh[:slots], fresh[slots:]
        if ctx.plan is None:
            start_plan(ctx.task, ctx.config, door, seeds)
    size = round_size(ctx.config.rounds.size, slots)
    if planning:
        jobs.append(plan_job(ctx.task, ctx.config, ctx.llm, door, size, fresh))
    if ctx.task.gated:
        jobs.append(promotion_job(ctx, door))
    if not jobs:
        return []

    def rounds() -> Awaitable[None]:
        return run_rounds(engine, door.state.stats, jobs, size)

    rounds.__name__ = "round-jobs"
    return [rounds]


async def finish_gated(session: Session, engine: Engine) -> None:
    """After the search: promote who no promotion reached among the top-K (through the engine's
    `promote` stage pool, as the rounds did)."""
    ctx = session.ctx
    if not ctx.task.gated:
        return
    if promotion_candidates(ctx.pool, ctx.config.promotion.top_k):
        done = ctx.rounds.promotions
        subflow = promotion_flow(ctx, engine.door)

        async def last_promotion() -> None:
            await subflow(ctx.run_id, done[-1].round + 1 if done else 1)

        await engine.finish(last_promotion)
