"""Promotion as a Prefect subflow `promotion-<round>`: the top-K pilot candidates are evaluated
at `full` with their best knob values (stages/rounds/promotion.py), on the run's evaluation
slots, and the round's results reach the head through the engine's door (flows/run_door.py),
like a plan or a speculative release: the subflow never holds the head.

The live run is given to the subflow the way Python gives it to any function: the flow is built
around it (`promotion_flow(run, door)`), so its Prefect parameters stay the plain run id and
round (what the UI shows) and no module keeps a registry of running runs.
"""

from __future__ import annotations

import logging
from typing import Any

from prefect import Flow, flow

from evoforge.infra.nodes import Node
from evoforge.stages.evaluation.job import EvalRequest
from evoforge.stages.pipeline.requests import request_for
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.rounds.promotion import promote, promotion_candidates, summarize
from evoforge.stages.rounds.promotion_data import PromotionData
from evoforge.stages.rounds.schedule import RoundJob, RunHead

log = logging.getLogger("evoforge.promotion")


async def promotion_round(run: RunView, door: RunHead, round_no: int) -> dict[str, Any]:
    """Promote the run's top pilot candidates to the full level and hand the round's results to
    `door`; returns the round's summary."""
    nodes = promotion_candidates(run.pool, run.config.promotion.top_k)
    if not nodes:
        log.info("promotion %d: no unpromoted candidate at the pilot level", round_no)
        return {"round": round_no, "promoted": []}

    def request_of(node: Node) -> EvalRequest:
        return request_for(node, run, node.params)

    results = await promote(nodes, run.evaluations, request_of)
    earlier = [n for n in run.pool.nodes if PromotionData.peek(n).round is not None]
    now = [node.copy(score_full=r.full) for r in results if (node := run.pool.get(r.node_id)) is not None]
    summary = summarize(round_no, results, earlier + now, run.pool.maximize)
    door.promotion(summary)
    log.info("promotion %d: %s; spearman %s; noisy %s", round_no,
             ", ".join(f"{r.node_id} pilot {r.pilot:.4g} -> full {r.full}" for r in results),
             summary.spearman, list(summary.noisy) or "none")
    return {"round": round_no, "promoted": list(summary.promoted), "spearman": summary.spearman,
            "noisy": list(summary.noisy)}


def promotion_flow(run: RunView, door: RunHead) -> Flow[[str, int], Any]:
    """The promotion subflow of this run: call it with (run id, round)."""

    @flow(name="promotion", flow_run_name="promotion-{round_no}", persist_result=False)
    async def promotion(run_id: str, round_no: int) -> dict[str, Any]:
        """Promote the run's top pilot candidates to the full level; returns the round's summary."""
        return await promotion_round(run, door, round_no)

    return promotion


def promotion_job(run: RunView, door: RunHead) -> RoundJob:
    """The promotion subflow, every `promotion.every` rounds."""
    subflow = promotion_flow(run, door)

    async def run_round(round_no: int) -> None:
        await subflow(run.run_id, round_no)

    return RoundJob("promotion", run.config.promotion.every, run_round)
