"""Promotion as a Prefect subflow `promotion-<round>`: the top-K pilot candidates become items of
the `promote` stage (stages/promote.py) and enter the engine through its door for items the entry
stage did not draw (flows/run_door.py); the stage's pool evaluates each at `full` with its best
knob values, on the run's evaluation slots, and takes it to the head like any other stage's
result. The head records the round when its last item is in; the subflow returns its summary.

The live run is given to the subflow the way Python gives it to any function: the flow is built
around it (`promotion_flow(run, door)`), so its Prefect parameters stay the plain run id and
round (what the UI shows) and no module keeps a registry of running runs.
"""

from __future__ import annotations

import logging
from typing import Any

from prefect import Flow, flow

from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.promote import Promote, promotion_items
from evoforge.stages.rounds.promotion import promotion_candidates
from evoforge.stages.rounds.schedule import RoundJob, RunHead

log = logging.getLogger("evoforge.promotion")


async def promotion_round(run: RunView, door: RunHead, round_no: int) -> dict[str, Any]:
    """Send the run's top pilot candidates through the promote stage and wait for the head to
    have them all; returns the round's summary (empty when the run stopped first)."""
    nodes = promotion_candidates(run.pool, run.config.promotion.top_k)
    if not nodes:
        log.info("promotion %d: no unpromoted candidate at the pilot level", round_no)
        return {"round": round_no, "promoted": []}
    done = await door.enter(promotion_items(nodes, round_no, run.pool.v), Promote.name)
    summary = next((s for s in reversed(run.rounds.promotions) if s.round == round_no), None)
    if not done or summary is None:
        log.info("promotion %d: the run stopped before every candidate was promoted", round_no)
        return {"round": round_no, "promoted": []}
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
