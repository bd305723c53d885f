"""timeline.jsonl: one line per status snapshot, status.json's numbers, resumed runs append."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from evoforge.flows.progress import tick
from evoforge.infra.runfiles import RunPaths
from evoforge.infra.timeline import Timeline, read_timeline, stage_gauges, timeline_row
from evoforge.stages.sinks.base import Event, EventKind
from evoforge.stages.sinks.hub import SinkHub
from evoforge.stages.sinks.run_files import RunFiles

STATUS = {"wall_s": 3.5, "evaluations": 4, "nodes_failed": 1, "best_score": 1.25, "candidates_per_min": 60.0,
          "tokens_in": 100, "tokens_out": 20, "research_workers": 3, "research_busy": 2, "research_queue": 0,
          "research_finished": 6, "research_busy_s": 1.0, "engineer_workers": 2, "engineer_busy": 2,
          "engineer_queue": 1, "engineer_finished": 4, "engineer_busy_s": 2.0, "research_target": 5}


def test_a_row_holds_the_snapshots_numbers_per_stage():
    row = timeline_row(STATUS, t=100.0, session=7.0)
    assert row["wall_s"] == 3.5 and row["evaluations"] == 4 and row["best_score"] == 1.25
    assert row["tokens"] == 120 and row["session"] == 7.0 and row["t"] == 100.0
    assert row["stages"] == {"research": {"workers": 3, "busy": 2, "queue": 0, "finished": 6},
                             "engineer": {"workers": 2, "busy": 2, "queue": 1, "finished": 4}}


def test_stage_gauges_ignore_keys_that_only_look_like_a_stage():
    assert stage_gauges({"max_workers": 3, "x_busy": 1}) == {}


def test_one_line_per_tick_with_increasing_time(tmp_path):
    path = tmp_path / "timeline.jsonl"
    timeline = Timeline(path, session=1.0)
    calls = []
    ticks = 5

    async def run():
        done = asyncio.Event()

        def snapshot():
            status = {**STATUS, "wall_s": 0.5 * len(calls), "evaluations": len(calls)}
            timeline.append(status, t=1000.0 + len(calls))
            calls.append(status)
            if len(calls) == ticks:
                done.set()
            return status

        task = asyncio.create_task(tick(snapshot, 0.01, 10, show=False))
        try:
            await asyncio.wait_for(done.wait(), timeout=10)  # until the 5th tick: a deadline, not a pace
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(run())
    rows = read_timeline(path)
    assert len(calls) == ticks and len(rows) == ticks  # one line per tick
    assert [r["evaluations"] for r in rows] == list(range(ticks))
    ts, walls = [r["t"] for r in rows], [r["wall_s"] for r in rows]
    assert all(b > a for a, b in zip(ts, ts[1:], strict=False))
    assert all(b > a for a, b in zip(walls, walls[1:], strict=False))


def test_a_resumed_session_appends_and_its_time_axis_continues(tmp_path):
    path = tmp_path / "timeline.jsonl"
    Timeline(path, session=1.0).append({**STATUS, "wall_s": 10.0}, t=100.0)
    Timeline(path, session=2.0).append({**STATUS, "wall_s": 10.4}, t=5000.0)  # wall_s includes the first
    rows = read_timeline(path)
    assert [(r["session"], r["wall_s"]) for r in rows] == [(1.0, 10.0), (2.0, 10.4)]


def test_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "timeline.jsonl"
    Timeline(path, session=1.0).append(STATUS, t=1.0)
    with path.open("a") as handle:
        handle.write('{"t": 2.0, "wall')  # a kill mid-write
    assert [r["t"] for r in read_timeline(path)] == [1.0]
    assert read_timeline(tmp_path / "missing.jsonl") == []


def test_a_failed_timeline_write_is_counted_against_the_run_files_sink_and_the_run_goes_on(tmp_path):
    timeline = Timeline(tmp_path / "no-such-folder" / "timeline.jsonl", session=1.0)
    with pytest.raises(FileNotFoundError):  # it raises: the sink that writes it counts the failure
        timeline.append(STATUS, t=1.0)
    hub = SinkHub([RunFiles(RunPaths(tmp_path), timeline)])
    hub.start()
    snapshot = {"status": {**STATUS, "updated_at": 1.0}, "leaderboard_md": "# board\n", "leaderboard": []}
    hub.emit(Event(EventKind.SNAPSHOT, payload=snapshot))
    hub.emit(Event(EventKind.SNAPSHOT, payload=snapshot))
    hub.close()
    assert hub.failures()["files"]["failures"] >= 1
    assert "FileNotFoundError" in hub.failures()["files"]["last_error"]
    assert (tmp_path / "leaderboard.md").read_text() == "# board\n"  # what came before it is written
