"""The ticker keeps status.json fresh and the wall-clock budget enforced, printing or not."""

from __future__ import annotations

import asyncio
import contextlib
import io

from rich.console import Console

from evoforge.flows.progress import ProgressView, pack, progress_line, tick

STATUS = {"evaluations": 3, "best_score": 1.5, "candidates_per_min": 60.0, "nodes_failed": 0,
          "tokens_in": 0, "tokens_out": 0}


def _tick_times(ticks: int, show: bool, out: io.StringIO | None = None,
                status: dict | None = None, max_evals: int = 10) -> tuple[int, int, str]:
    """Run the ticker (every 10 ms) until its `ticks`-th snapshot, then cancel it; returns the
    snapshots taken, the `on_tick` calls and what it printed. The tick that took the last snapshot
    has run its `on_tick` and its display by then: the ticker yields only at its sleep."""
    calls = {"snapshot": 0, "on_tick": 0}
    out = out if out is not None else io.StringIO()

    async def run():
        done = asyncio.Event()

        def snapshot():
            calls["snapshot"] += 1
            if calls["snapshot"] == ticks:
                done.set()
            return status or STATUS

        def on_tick():
            calls["on_tick"] += 1

        task = asyncio.create_task(tick(snapshot, 0.01, max_evals, out=out,
                                        on_tick=on_tick, show=show))
        try:
            await asyncio.wait_for(done.wait(), timeout=10)  # a deadline, not a pace
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(run())
    return calls["snapshot"], calls["on_tick"], out.getvalue()


def test_quiet_ticking_still_snapshots_and_checks_the_budget_but_prints_nothing():
    snapshots, checks, printed = _tick_times(5, show=False)
    assert (snapshots, checks, printed) == (5, 5, "")  # every tick snapshots and checks the budget


def test_shown_ticking_prints_the_progress_line():
    _, _, printed = _tick_times(1, show=True)  # the first tick prints (plain lines: then every 10 s)
    assert printed == progress_line(STATUS, 10) + "\n" and "[evoforge] evals 3/10 | best 1.5" in printed


LIVE_STATUS = {"evaluations": 42, "best_score": 1.80207, "candidates_per_min": 128.98, "nodes_failed": 7,
               "tokens_in": 12000, "tokens_out": 3400,
               "research_workers": 4, "research_busy": 3, "research_queue": 0, "research_finished": 50,
               "engineer_workers": 2, "engineer_busy": 2, "engineer_queue": 1, "engineer_finished": 44,
               "analyze_workers": 1, "analyze_busy": 0, "analyze_queue": 0, "analyze_finished": 40}
SHOWN = ("evals 42/100", "best 1.80207", "129.0 cand/min", "failed 7", "llm busy 3", "eval busy 2 q 1",
         "tokens 15.4k", "research 3/4 busy", "engineer 2/2 busy q 1", "analyze 0/1 busy")


def _render(status: dict, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(ProgressView(status, 100))
    return console.export_text().splitlines()


def test_the_live_display_fits_the_width_and_shows_the_status_numbers():
    lines = _render(LIVE_STATUS, 60)
    assert len(lines) > 2 and all(len(line) <= 60 for line in lines)
    for field in SHOWN:  # each field whole on one line: never split where the width runs out
        assert any(field in line for line in lines), field
    assert lines[0].startswith("evoforge evals 42/100")


def test_a_wide_terminal_shows_one_line_of_counters_and_one_of_workers():
    lines = _render(LIVE_STATUS, 200)
    assert lines == ["evoforge " + progress_line(LIVE_STATUS, 100).removeprefix("[evoforge] "),
                     "workers research 3/4 busy | engineer 2/2 busy q 1 | analyze 0/1 busy"]


def test_a_field_longer_than_the_width_is_cut_not_wrapped():
    assert pack(["x" * 30, "yy"], 12) == ["x" * 11 + "…", "yy"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_ticker_redraws_the_display_in_place():
    # two ticks: the display is drawn, then redrawn
    _, _, printed = _tick_times(2, show=True, out=_Terminal(), status=LIVE_STATUS, max_evals=100)
    assert "evals 42/100" in printed and "research 3/4 busy" in printed
    assert "\x1b[1A" in printed  # cursor up: the display was redrawn over itself
    assert "[evoforge]" not in printed  # not the plain line
