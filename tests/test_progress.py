"""The ticker keeps status.json fresh and the wall-clock budget enforced, printing or not."""

from __future__ import annotations

import asyncio
import io

from evoforge.flows.progress import tick

STATUS = {"evaluations": 3, "best_score": 1.5, "candidates_per_min": 60.0, "nodes_failed": 0,
          "tokens_in": 0, "tokens_out": 0}


def _tick_for(seconds: float, show: bool) -> tuple[int, int, str]:
    calls = {"snapshot": 0, "on_tick": 0}
    out = io.StringIO()

    def snapshot():
        calls["snapshot"] += 1
        return STATUS

    def on_tick():
        calls["on_tick"] += 1

    async def run():
        task = asyncio.create_task(tick(snapshot, 0.01, 10, out=out, on_tick=on_tick, show=show))
        await asyncio.sleep(seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    return calls["snapshot"], calls["on_tick"], out.getvalue()


def test_quiet_ticking_still_snapshots_and_checks_the_budget_but_prints_nothing():
    snapshots, checks, printed = _tick_for(0.2, show=False)
    assert snapshots >= 5 and checks == snapshots and printed == ""


def test_shown_ticking_prints_the_progress_line():
    _, _, printed = _tick_for(0.05, show=True)
    assert "[evoforge] evals 3/10 | best 1.5" in printed
