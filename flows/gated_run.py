"""What a run adds for gated ML work: the first research plan, the round jobs (plan agent,
promotion) beside the pipeline, and the end of the search (a last promotion; the final report
that follows it is flows/final_report.py)."""

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
    ctx, head = session.ctx, session.head
    jobs: list[RoundJob] = []
    fresh = _hypotheses(session)
    slots = ctx.config.plan.slots
    if plan_enabled(ctx):
        seeds, fresh = fresh[:slots], fresh[slots:]
        if head.state.rounds.plan is None:
            start_plan(ctx, head, seeds)
    size = round_size(ctx.config.rounds.size, slots)
    if plan_enabled(ctx):
        jobs.append(plan_job(ctx, head, size, fresh))
    if ctx.task.gated:
        jobs.append(promotion_job(ctx.run_id, ctx.config.promotion.every))
    if not jobs:
        return []

    def rounds() -> Awaitable[None]:
        return run_rounds(engine, head.state.stats, jobs, size)

    rounds.__name__ = "round-jobs"
    return [rounds]


async def finish_gated(session: Session) -> None:
    """After the search: promote who no promotion reached among the top-K."""
    ctx = session.ctx
    if not ctx.task.gated:
        return
    if promotion_candidates(ctx.pool, ctx.config.promotion.top_k):
        done = session.head.state.rounds.promotions
        await promotion_flow(ctx.run_id, done[-1].round + 1 if done else 1)
