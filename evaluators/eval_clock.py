"""The clock of one evaluation: its own time, told apart from the time it waited on the event loop.

An evaluation is measured from its start (its slot granted, the job running) to the moment its
child's exit was known off the event loop (the fork server's stamp when it reaped the child; a
cold child: when the loop saw it). Each hand-off that made the evaluation wait for a busy event
loop before its child was started (a thread's file work done, the loop not yet back to it) is
added to ``loop_wait``: it is taken out of the recorded time and reported beside it, as is the
loop's delay in seeing the exit. All stamps are ``time.monotonic()``, one clock for the whole
machine (CLOCK_MONOTONIC), so the fork server's stamps compare with the flow's. Example::

    with timing() as clock:
        result = await run_harness(task, code, args)
    seconds, wait_s = clock.split(result.exited_at, result.finished_at)
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["EvalClock", "current", "granted", "timing"]


@dataclass
class EvalClock:
    """Stamps of one evaluation (monotonic seconds) and the loop waits before its child started."""

    start: float = field(default_factory=time.monotonic)
    loop_wait: float = 0.0  # seconds spent waiting for the event loop before the child started
    launched: float | None = None  # when the child was handed to its launcher (it runs from here)
    marks: dict[str, float] = field(default_factory=dict)  # named stamps, for benchmarks

    def waited(self, ready_at: float, resumed_at: float) -> None:
        """A hand-off was ready at ``ready_at`` and the loop resumed the evaluation at ``resumed_at``."""
        if self.launched is None:  # later waits overlap the child's run: not the evaluation's delay
            self.loop_wait += max(0.0, resumed_at - ready_at)

    def mark(self, name: str, at: float | None = None) -> None:
        """Stamp ``name`` (now, or ``at``)."""
        self.marks[name] = time.monotonic() if at is None else at

    def split(self, exited_at: float | None, seen_at: float) -> tuple[float, float]:
        """(the evaluation's own seconds, the seconds it waited on the loop), for a result the
        loop had in hand at ``seen_at`` whose child's exit was known off the loop at ``exited_at``."""
        end = seen_at if exited_at is None else min(max(exited_at, self.start), seen_at)
        wait = min(self.loop_wait, end - self.start) + (seen_at - end)
        return seen_at - self.start - wait, wait


_CLOCK: contextvars.ContextVar[EvalClock | None] = contextvars.ContextVar("evoforge_eval_clock", default=None)
_GRANTED: contextvars.ContextVar[float | None] = contextvars.ContextVar("evoforge_slot_granted", default=None)


def current() -> EvalClock | None:
    """The clock of the evaluation running in this context, if any."""
    return _CLOCK.get()


@contextlib.contextmanager
def granted() -> Iterator[None]:
    """The code inside runs an evaluation whose slot was granted now (its clock marks ``granted``:
    what a wrapper, e.g. its Prefect task run, took before the evaluation started)."""
    token = _GRANTED.set(time.monotonic())
    try:
        yield
    finally:
        _GRANTED.reset(token)


@contextlib.contextmanager
def timing() -> Iterator[EvalClock]:
    """A fresh clock for the evaluation run inside (its tasks and threads see it as ``current``)."""
    clock = EvalClock()
    at = _GRANTED.get()
    if at is not None:
        clock.mark("granted", at)
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)
