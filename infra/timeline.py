"""timeline.jsonl: the run's gauges over time, one JSON line per status snapshot, for the plots.

A line holds the clock time `t`, the run's wall seconds `wall_s` (over every session of the run,
so a resumed run's axis continues where the last one stopped), the counters a plot needs, and per
stage its workers, busy workers, queue depth and items finished in this session (`session` tells
sessions apart: `finished` restarts at 0 in each). Example:

>>> status = {"wall_s": 4.0, "evaluations": 7, "research_workers": 2, "research_busy": 1,
...           "research_queue": 0, "research_finished": 9, "research_busy_s": 3.2}
>>> stage_gauges(status)
{'research': {'workers': 2, 'busy': 1, 'queue': 0, 'finished': 9}}
>>> timeline_row(status, t=100.0, session=1.0)["stages"]["research"]["finished"]
9
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_STAGE_GAUGES = ("workers", "busy", "queue", "finished")
_COUNTERS = ("evaluations", "nodes_evaluated", "nodes_failed", "proposals", "best_score",
             "candidates_per_min", "in_flight", "research_target", "records_lag_s", "cpu",
             "eval_slot_wait_s", "eval_wrapper_s", "eval_loop_wait_s")


def stage_gauges(status: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per stage (in the status's order), its `<stage>_workers/_busy/_queue/_finished` gauges."""
    out: dict[str, dict[str, int]] = {}
    for key in status:
        if key.endswith("_workers"):
            name = key[: -len("_workers")]
            if all(f"{name}_{g}" in status for g in _STAGE_GAUGES):
                out[name] = {g: status[f"{name}_{g}"] for g in _STAGE_GAUGES}
    return out


def timeline_row(status: dict[str, Any], t: float, session: float) -> dict[str, Any]:
    """One timeline line from a status snapshot (status.json's numbers, nothing recomputed)."""
    row: dict[str, Any] = {"t": round(t, 3), "session": session, "wall_s": status.get("wall_s", 0.0)}
    row.update({k: status[k] for k in _COUNTERS if k in status})
    row["tokens"] = status.get("tokens_in", 0) + status.get("tokens_out", 0)
    row["stages"] = stage_gauges(status)
    return row


class Timeline:
    """Appends one line per snapshot to `path` (a failed write raises: the run files sink counts it)."""

    def __init__(self, path: Path, session: float):
        self.path, self.session = path, session

    def append(self, status: dict[str, Any], t: float) -> None:
        line = json.dumps(timeline_row(status, t, self.session)) + "\n"
        with self.path.open("a") as handle:
            handle.write(line)  # one write per line: a reader sees whole lines


def read_timeline(path: Path) -> list[dict[str, Any]]:
    """Every line of a timeline, oldest first; a missing file is empty, a torn last line skipped."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill mid-write
    return rows
