"""Promotion as a Prefect subflow `promotion-<round>`: the top-K pilot candidates are evaluated
at `full` with their best knob values (stages/rounds/promotion.py), and the head folds the scores in.

The subflow's parameters are the run id and the round (both plain); the live run it works on is
found through `live_runs`, registered by the evolution flow for as long as it runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from prefect import flow

from evoforge.flows.head import Head
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.rounds.promotion import promote, promotion_candidates, summarize
from evoforge.stages.rounds.schedule import RoundJob

log = logging.getLogger("evoforge.promotion")

@dataclass
class LiveRun:
    """What a promotion needs of the running evolution flow: what stages read, and the head."""

    ctx: StageContext
    head: Head


live_runs: dict[str, LiveRun] = {}


@flow(name="promotion", flow_run_name="promotion-{round_no}", persist_result=False)
async def promotion_flow(run_id: str, round_no: int) -> dict[str, Any]:
    """Promote the run's top pilot candidates to the full level; returns the round's summary."""
    live = live_runs[run_id]
    ctx = live.ctx
    nodes = promotion_candidates(ctx.pool, ctx.config.promotion.top_k)
    if not nodes:
        log.info("promotion %d: no unpromoted candidate at the pilot level", round_no)
        return {"round": round_no, "promoted": []}
    results = await promote(nodes, ctx)

    earlier = [n for n in ctx.pool.nodes if n.promoted_round is not None]
    now = [node.copy(score_full=r.full) for r in results if (node := ctx.pool.get(r.node_id)) is not None]
    summary = summarize(round_no, results, earlier + now, ctx.pool.maximize)
    live.head.promotion(summary)
    log.info("promotion %d: %s; spearman %s; noisy %s", round_no,
             ", ".join(f"{r.node_id} pilot {r.pilot:.4g} -> full {r.full}" for r in results),
             summary.spearman, list(summary.noisy) or "none")
    return {"round": round_no, "promoted": list(summary.promoted), "spearman": summary.spearman,
            "noisy": list(summary.noisy)}


def promotion_job(run_id: str, every: int) -> RoundJob:
    """The promotion subflow, every `promotion.every` rounds."""

    async def run(round_no: int) -> None:
        await promotion_flow(run_id, round_no)

    return RoundJob("promotion", every, run)
