"""The end of a gated run, as Prefect subflows: a last promotion of the candidates no promotion
reached yet, then `final-report`: the held-out `final` evaluation of the search's winners.

The leak barrier: the winners are chosen (by their full scores) before any final evaluation
runs, and the final scores go to their own table (`NodeStore.final_scores`), never onto a node,
so no code that chooses parents, inspirations, plans or promotions can read them; the report is
written from that table once the search is over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from prefect import flow

from evoforge.flows.promotion_flow import live_runs
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.nodestore import FinalScore
from evoforge.stages.evaluation.requests import request_for
from evoforge.stages.population.pool import Pool
from evoforge.stages.sinks.base import EventKind

log = logging.getLogger("evoforge.final")

FINAL_RUN = "final-{node}"


def winners(pool: Pool, k: int) -> list[Node]:
    """The search's k best at `full` (promoted candidates), chosen without any final score."""
    scored = [n for n in pool.nodes if n.status == EVALUATED and n.score_full is not None]
    scored.sort(key=lambda n: n.score_full, reverse=pool.maximize)  # type: ignore[arg-type,return-value]
    return scored[:k]


@flow(name="final-report", flow_run_name="final-report-{run_id}", persist_result=False)
async def final_report_flow(run_id: str) -> dict[str, Any]:
    """Evaluate the winners on the held-out data; the scores go to the final table only."""
    live = live_runs[run_id]
    ctx = live.ctx
    chosen = winners(ctx.pool, ctx.config.promotion.final_top)

    async def one(rank: int, node: Node) -> FinalScore:
        request = request_for(node, ctx, node.params).with_name(FINAL_RUN.format(node=node.id))
        outcome = (await ctx.evaluations.run(request.at_level("final"), None)).outcome
        return FinalScore(node.id, rank, outcome.score if outcome.ok else None, dict(outcome.metrics),
                          outcome.error, outcome.seconds, outcome.cpu_s or 0.0, time.time())

    finals = list(await asyncio.gather(*(one(i + 1, n) for i, n in enumerate(chosen))))
    summary = {f"final.{f.node_id}": f.score for f in finals if f.score is not None}
    if summary:
        summary["final_score_winner"] = finals[0].score or 0.0
    live.head.record(EventKind.FINAL, (finals, summary), eval_s=sum(f.seconds for f in finals),
                     eval_cpu_s=sum(f.cpu_s for f in finals))  # the sinks: the final table, never a node
    log.info("final report: %s", ", ".join(f"{f.node_id} final {f.score}" for f in finals) or "no winner")
    return {"finals": {f.node_id: f.score for f in finals}}
