"""The live progress line during `evoforge run`, and the periodic status snapshot."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO


def progress_line(status: dict[str, Any], max_evals: int) -> str:
    """One line: evaluations, best, rate, stage occupancy, tokens."""
    best = status.get("best_score")
    best_txt = f"{best:.6g}" if isinstance(best, (int, float)) else "-"
    if best_txt != "-" and status.get("search_stage", "full") != "full":
        best_txt += f" ({status.get('best_stage')})"  # a staged run: say which stage scored it
    parts = [
        f"evals {status['evaluations']}/{max_evals}",
        f"best {best_txt}",
        f"{status['candidates_per_min']:.1f} cand/min",
        f"failed {status['nodes_failed']}",
    ]
    if "phase" in status:
        parts.append(f"gen {status['generation']} {status['phase']}")
    if "research_busy" in status:
        parts.append(
            f"llm busy {status['research_busy']} | eval busy {status['engineer_busy']} "
            f"q {status['engineer_queue']}"
        )
    tokens = status["tokens_in"] + status["tokens_out"]
    if tokens:
        parts.append(f"tokens {tokens / 1000:.1f}k")
    return "[evoforge] " + " | ".join(parts)


async def tick(snapshot: Callable[[], dict[str, Any]], interval_s: float, max_evals: int,
               out: TextIO | None = None, on_tick: Callable[[], None] | None = None,
               show: bool = True) -> None:
    """Every `interval_s`: refresh the snapshot files, run `on_tick`, and (with `show`) print the
    progress line; forever."""
    stream = out or sys.stderr
    is_tty = stream.isatty()
    last_print = 0.0
    while True:
        await asyncio.sleep(interval_s)
        status = snapshot()
        if on_tick is not None:
            on_tick()
        now = time.monotonic()
        if not show:
            continue
        if is_tty:
            stream.write("\r" + progress_line(status, max_evals)[:160].ljust(160))
            stream.flush()
        elif now - last_print >= max(10.0, interval_s):
            stream.write(progress_line(status, max_evals) + "\n")
            stream.flush()
            last_print = now
