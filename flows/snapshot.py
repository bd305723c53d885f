"""The run's periodic snapshot: status.json's numbers and the leaderboards, built on the flow's
event loop from the in-memory state (a few milliseconds every `engine.progress_interval_s`) and
handed to the sinks to write; the live display and the Prefect progress read the same numbers.
`cpu` says where the orchestration's CPU went: the event loop's thread, the whole flow process,
the sinks' threads, the fork servers (their own work, not the evaluations they fork).
"""

from __future__ import annotations

import os
import time
from typing import Any

from evoforge.evaluators.warm import WARM
from evoforge.flows.run_state import RunState
from evoforge.stages.reports.leaderboard import leaderboard_md, leaderboard_rows
from evoforge.stages.reports.status import status_dict
from evoforge.stages.sinks.hub import SinkHub

LEADERBOARD_ROWS = 100  # leaderboard.json


def build_snapshot(state: RunState, hub: SinkHub, task_name: str, facts: dict[str, Any],
                   gauges: dict[str, Any], models: dict[str, Any]) -> dict[str, Any]:
    """{status, leaderboard_md, leaderboard}: what the run files sink writes and the display shows.

    `facts` are the run's fixed facts (run id, task, mode, backend, ...), `gauges` the engine's,
    `models` the per-model accounting."""
    health = hub.health()
    sinks = sink_table(hub)
    failures = hub.failures()
    cpu = {"loop_s": round(time.thread_time(), 3),  # the caller's thread: the flow's event loop
           "process_s": round(time.process_time(), 3),  # every thread of the flow's process
           "sinks_s": round(sum(h.cpu_s for h in health.values()), 3),
           "fork_servers_s": round(WARM.cpu_s(), 3), "evaluations_s": round(state.stats.eval_cpu_s, 3)}
    status = status_dict(state.stats, state.pool, state.wall_s(), {
        **facts, "pid": os.getpid(), "updated_at": time.time(), "models": models,
        "tracking_failures": failures, "sinks": sinks, "records_lag_s": hub.lag_s(), "cpu": cpu, **gauges})
    return {"status": status,
            "leaderboard_md": leaderboard_md(task_name, state.pool, plan=state.rounds.plan,
                                             history=state.history.updates,
                                             promotions=state.rounds.promotions),
            "leaderboard": leaderboard_rows(state.pool, top=LEADERBOARD_ROWS)}


def sink_table(hub: SinkHub) -> dict[str, dict[str, Any]]:
    """Each sink's events recorded, batches, failures, events waiting and never recorded, busy and
    CPU seconds, and its own gauges."""
    own = hub.gauges()
    return {name: {"recorded": h.recorded, "batches": h.batches, "failures": h.failures,
                   "pending": h.pending, "never_recorded": h.never_recorded,
                   "busy_s": round(h.busy_s, 3), "cpu_s": round(h.cpu_s, 3), **own.get(name, {})}
            for name, h in hub.health().items()}


def after_close(hub: SinkHub) -> dict[str, Any]:
    """What the final status.json says of the records once every sink has closed: the lag (0
    when everything emitted was recorded), the sinks' counts and the failures."""
    return {"records_lag_s": hub.lag_s(), "sinks": sink_table(hub), "tracking_failures": hub.failures()}
