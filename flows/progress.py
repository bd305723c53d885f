"""The live progress display during `evoforge run`, and the periodic status snapshot.

On a terminal the display is redrawn in place (rich's `Live`) and wraps to the terminal's width:
evaluations, best, rate, failures, busy LLM and evaluation workers, queue and tokens, then a line
of workers per stage. Off a terminal (CI logs) a plain line is printed every 10 s or more. Every
number is the status snapshot's (status.json), never recomputed here.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console, ConsoleOptions
from rich.live import Live
from rich.text import Text

from evoforge.infra.timeline import stage_gauges

_SEP = " | "


def progress_parts(status: dict[str, Any], max_evals: int) -> list[str]:
    """The progress line's fields: evaluations, best, rate, failures, stage occupancy, tokens."""
    best = status.get("best_score")
    best_txt = f"{best:.6g}" if isinstance(best, (int, float)) else "-"
    if best_txt != "-" and status.get("search_level", "full") != "full":
        best_txt += f" ({status.get('best_level')})"  # a gated run: say which level scored it
    parts = [
        f"evals {status['evaluations']}/{max_evals}",
        f"best {best_txt}",
        f"{status['candidates_per_min']:.1f} cand/min",
        f"failed {status['nodes_failed']}",
    ]
    if status.get("llm_paused"):
        parts.append(f"LLM down: paused ({status.get('llm_last_error') or 'no answer'})")
    elif status.get("llm_state") == "busy":  # it answers its probe, not the calls in time
        parts.append(f"LLM busy: {status.get('llm_last_error') or 'calls time out'}")
    if "phase" in status:
        parts.append(f"gen {status['generation']} {status['phase']}")
    if "research_busy" in status:
        parts += [f"llm busy {status['research_busy']}",
                  f"eval busy {status['engineer_busy']} q {status['engineer_queue']}"]
    tokens = status["tokens_in"] + status["tokens_out"]
    if tokens:
        parts.append(f"tokens {tokens / 1000:.1f}k")
    return parts


def progress_line(status: dict[str, Any], max_evals: int) -> str:
    """One line: evaluations, best, rate, stage occupancy, tokens."""
    return "[evoforge] " + _SEP.join(progress_parts(status, max_evals))


def worker_parts(status: dict[str, Any]) -> list[str]:
    """Per stage: busy/workers and, when items wait for it, how many."""
    return [f"{name} {g['busy']}/{g['workers']} busy" + (f" q {g['queue']}" if g["queue"] else "")
            for name, g in stage_gauges(status).items()]


def pack(parts: list[str], width: int, lead: str = "") -> list[str]:
    """`lead` and `parts` joined by " | " into lines of at most `width` characters; a part is
    never split across lines (continuation lines are indented under the lead, and a part longer
    than a line is cut with an ellipsis)."""
    lines: list[str] = []
    line = ""
    for part in parts:
        candidate = line + _SEP + part if line else lead + part
        if line and len(candidate) > width:
            lines.append(line)
            candidate = " " * len(lead) + part
        line = candidate if len(candidate) <= width else candidate[: width - 1] + "…"
    return lines + [line] if line else lines


@dataclass(frozen=True)
class ProgressView:
    """The live display of one status snapshot, wrapped to the console's width."""

    status: dict[str, Any]
    max_evals: int

    def lines(self, width: int) -> list[str]:
        width = max(20, width)
        lines = pack(progress_parts(self.status, self.max_evals), width, lead="evoforge ")
        workers = worker_parts(self.status)
        return lines + (pack(workers, width, lead="workers ") if workers else [])

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        for line in self.lines(options.max_width):
            text = Text(line, no_wrap=True, overflow="ellipsis")
            lead = next((w for w in ("evoforge ", "workers ") if line.startswith(w)), "")
            text.stylize("bold cyan", 0, len(lead))
            yield text


class _Display:
    """Where the ticker shows progress: a live region on a terminal, plain lines elsewhere."""

    def __init__(self, stream: TextIO, interval_s: float):
        self.stream, self.interval_s = stream, interval_s
        self.live: Live | None = None
        self.is_tty = stream.isatty()
        self.last_print = 0.0

    def show(self, status: dict[str, Any], max_evals: int) -> None:
        view = ProgressView(status, max_evals)
        if self.is_tty:
            if self.live is None:
                self.live = Live(view, console=Console(file=self.stream), auto_refresh=False)
                self.live.start()
            self.live.update(view, refresh=True)
            return
        now = time.monotonic()
        if now - self.last_print >= max(10.0, self.interval_s):
            self.stream.write(progress_line(status, max_evals) + "\n")
            self.stream.flush()
            self.last_print = now

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()  # the last display stays on screen, the cursor below it


async def tick(snapshot: Callable[[], dict[str, Any]], interval_s: float, max_evals: int,
               out: TextIO | None = None, on_tick: Callable[[], None] | None = None,
               show: bool = True) -> None:
    """Every `interval_s`: refresh the snapshot files, run `on_tick`, and (with `show`) update
    the progress display; forever (until cancelled)."""
    display = _Display(out or sys.stderr, interval_s) if show else None
    try:
        while True:
            await asyncio.sleep(interval_s)
            status = snapshot()
            if on_tick is not None:
                on_tick()
            if display is not None:
                display.show(status, max_evals)
    finally:
        if display is not None:
            display.close()
