"""The end of a run, as a Prefect subflow `final-report`: the held-out evaluation of the search's
winners, once, after the search. A gated task's winners run at its `final` level (in the
sandbox); a task scored by a task model (text, playbook) runs them on its `test` split, through
the same channel as the search's evaluations (its cache, its meters in `status.json`
`task_model`, the money budget).

The leak barrier: the winners are chosen (by their `full` score: a promoted candidate's, a
task-model candidate's val score) before any held-out evaluation runs, and the held-out scores go
to their own table (`NodeStore.final_scores`), never onto a node, so no code that chooses
parents, inspirations, plans or promotions can read them; the report is written from that table
once the search is over. A failed evaluation is recorded with its error. A resumed run does not
evaluate again a winner whose held-out score is recorded.

The subflow is built around the live run (`final_report_flow(run)`): its Prefect parameters stay
the plain run id and ranks, and no module keeps a registry of running runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from prefect import Flow, flow

from evoforge.evaluators.task import Task
from evoforge.evaluators.task_model import channel_of
from evoforge.flows.session import Session
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.nodestore import FinalScore
from evoforge.stages.evaluation.job import EvalRequest
from evoforge.stages.pipeline.requests import request_for
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.pool import Pool
from evoforge.stages.sinks.base import EventKind

log = logging.getLogger("evoforge.final")

FINAL, TEST = "final", "test"  # what the winners are evaluated on: a level, or a split of cases


def held_out_of(task: Task) -> str | None:
    """What the winners are evaluated on after the search: `final` (a gated task declaring that
    level), `test` (a task-model task with test cases), or None (nothing held out)."""
    if task.uses_task_model:
        return TEST if channel_of(task).module.ids(TEST) else None
    return FINAL if task.gated and task.has_final else None


def winners(pool: Pool, k: int) -> list[Node]:
    """The search's k best at `full` (ties: the smaller node id first), chosen without any
    held-out score: nothing here can see one."""
    scored = [n for n in pool.nodes if n.status == EVALUATED and n.score_full is not None]
    sign = -1.0 if pool.maximize else 1.0
    scored.sort(key=lambda n: (sign * n.score_full, n.id))  # type: ignore[operator]
    return scored[:k]


def ranked(chosen: Sequence[Node], fresh: Sequence[FinalScore], recorded: Sequence[FinalScore]
           ) -> list[FinalScore]:
    """The table's rows after this report: the winners in rank order (a fresh row, else the one
    recorded), then the earlier winners a resumed search moved out of the top, in their order."""
    by_id = {r.node_id: r for r in recorded} | {r.node_id: r for r in fresh}
    ids = [n.id for n in chosen]
    ids += [r.node_id for r in recorded if r.node_id not in ids]
    return [dataclasses.replace(by_id[i], rank=rank) for rank, i in enumerate(ids, 1) if i in by_id]


def _request(node: Node, ctx: RunView, held_out: str) -> EvalRequest:
    request = request_for(node, ctx, node.params).with_name(f"{held_out}-{node.id}")
    if held_out == FINAL:
        return request.at_level(FINAL)
    test = tuple(channel_of(ctx.task).module.ids(TEST))
    return dataclasses.replace(request, order=test, speculation=None, quick_test=False)


async def held_out_scores(ctx: RunView, ranks: dict[str, int]) -> list[FinalScore]:
    """Evaluate the winners named in `ranks` (node id -> the search's rank) on the held-out data
    once; returns their rows (recorded by the caller, into the final table only)."""
    held_out = held_out_of(ctx.task)
    assert held_out is not None

    async def one(node_id: str, rank: int) -> FinalScore:
        node = ctx.pool.get(node_id)
        assert node is not None
        outcome = (await ctx.evaluations.run(_request(node, ctx, held_out), None)).outcome
        return FinalScore(node.id, rank, outcome.score if outcome.ok else None, dict(outcome.metrics),
                          outcome.error, outcome.seconds, outcome.cpu_s or 0.0, time.time())

    return list(await asyncio.gather(*(one(i, r) for i, r in ranks.items())))


def final_report_flow(ctx: RunView) -> Flow[[str, dict[str, int]], list[FinalScore]]:
    """The final-report subflow of this run: call it with (run id, ranks)."""

    @flow(name="final-report", flow_run_name="final-report-{run_id}", persist_result=False)
    async def final_report(run_id: str, ranks: dict[str, int]) -> list[FinalScore]:
        """Evaluate the named winners on the held-out data once; returns their rows."""
        return await held_out_scores(ctx, ranks)

    return final_report


async def report_held_out(session: Session) -> None:
    """After the search: evaluate the `promotion.final_top` winners on the held-out data (those a
    resumed run has not scored yet) and record the scores in the final table."""
    ctx, k = session.ctx, session.ctx.config.promotion.final_top
    held_out = held_out_of(ctx.task)
    if held_out is None or k == 0:
        return
    chosen = winners(ctx.pool, k)
    # the rows earlier sessions recorded (this session records only here, once)
    recorded = session.store.reader().final_scores()
    scored = {r.node_id for r in recorded if r.score is not None}
    todo = {n.id: rank for rank, n in enumerate(chosen, 1) if n.id not in scored}
    fresh = await final_report_flow(ctx)(ctx.run_id, todo) if todo else []
    rows = ranked(chosen, fresh, recorded)
    if rows == list(recorded):
        log.info("final report: the %s scores of the winners are recorded already", held_out)
        return
    winners_rows = rows[:len(chosen)]
    summary: dict[str, Any] = {f"{held_out}.{r.node_id}": r.score for r in winners_rows
                               if r.score is not None}
    if winners_rows and winners_rows[0].score is not None:
        summary[f"{held_out}_score_winner"] = winners_rows[0].score
    session.head.record(EventKind.FINAL, (rows, summary), eval_s=sum(f.seconds for f in fresh),
                        eval_cpu_s=sum(f.cpu_s for f in fresh))  # the sinks: the final table, never a node
    log.info("final report: %s", ", ".join(f"{r.node_id} {held_out} {r.score if r.error is None else r.error}"
                                           for r in winners_rows) or "no winner")
