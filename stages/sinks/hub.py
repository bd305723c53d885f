"""The sink hub: every sink on its own thread, fed events in batches, its failures counted.

`emit` is what the head calls on the flow's event loop: it appends the event to each sink's
queue and returns (microseconds). Each sink's thread waits for events, lets them gather for the
sink's `interval_s` (a stop or a `sync` cuts that short), then hands the batch to
`Sink.record`. A sink that raises keeps its place in the run: the failure is counted
(`failures()`: status.json `tracking_failures`), logged with its traceback to run.log, and the
next batch is tried. `sync` waits until every event emitted so far is recorded (the end of a
run, a report); `close` records what is left, closes the sinks and joins their threads, so a
clean stop leaves no record behind. An error in the hub's own thread loop (not in a sink) goes
to `on_fatal`, the engine's one fatal path.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evoforge.infra.nodes import Node
from evoforge.stages.sinks.base import Event, Sink

log = logging.getLogger("evoforge.sinks")

_ERROR_CHARS = 300


@dataclass
class SinkHealth:
    """What one sink has done: events recorded, failures, the last error, seconds spent."""

    recorded: int = 0
    batches: int = 0
    failures: int = 0
    last_error: str | None = None
    busy_s: float = 0.0
    cpu_s: float = 0.0


@dataclass
class _Runner:
    """One sink's queue, thread and health."""

    sink: Sink
    context: contextvars.Context
    queue: deque[Event] = field(default_factory=deque)
    cond: threading.Condition = field(default_factory=threading.Condition)
    health: SinkHealth = field(default_factory=SinkHealth)
    emitted: int = 0
    done: int = 0
    failing: int = 0  # batches failed in a row
    oldest: float | None = None  # when the oldest unrecorded event was emitted (monotonic)
    hurry: bool = False  # a sync or close wants the queue recorded now
    closing: bool = False
    thread: threading.Thread | None = None


class _Absent(Sink):
    """A sink that could not be made (its failure is counted under its name); records nothing."""

    def __init__(self, name: str) -> None:
        self.name = name  # type: ignore[misc]

    def record(self, events: Sequence[Event]) -> None:
        return None


class SinkHub:
    """Fans events out to sinks, each recording on its own thread in batches."""

    def __init__(self, sinks: Sequence[Sink], on_fatal: Callable[[str, BaseException], None] | None = None,
                 rebuild_from: Sequence[Node] | None = None) -> None:
        names = [s.name for s in sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"two sinks share a name: {names}")
        self.on_fatal = on_fatal
        self._runners = {s.name: _Runner(s, contextvars.copy_context()) for s in sinks}
        self._rebuild_from = rebuild_from
        self._started = False

    @property
    def sinks(self) -> list[Sink]:
        return [r.sink for r in self._runners.values()]

    def start(self) -> None:
        """Start every sink's thread; with `rebuild_from`, each first catches up from those nodes."""
        for runner in self._runners.values():
            runner.thread = threading.Thread(target=runner.context.run, args=(self._loop, runner),
                                             name=f"evoforge-sink-{runner.sink.name}", daemon=True)
            runner.thread.start()
        self._started = True

    def emit(self, event: Event) -> None:
        """Queue `event` for every sink (from the event loop; returns at once)."""
        now = time.monotonic()
        for runner in self._runners.values():
            with runner.cond:
                runner.queue.append(event)
                runner.emitted += 1
                if runner.oldest is None:
                    runner.oldest = now
                if runner.sink.urgent(event):
                    runner.hurry = True
                runner.cond.notify()

    def sync(self, timeout: float | None = None) -> bool:
        """Wait until every event emitted before the call is recorded (failed batches count as
        recorded); False when `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for runner in self._runners.values():
            with runner.cond:
                target = runner.emitted
                runner.hurry = True
                runner.cond.notify_all()
                while runner.done < target and runner.thread is not None and runner.thread.is_alive():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    runner.cond.wait(left)
        return True

    def close(self, timeout: float = 120.0) -> None:
        """Record what is queued, close every sink, join the threads."""
        for runner in self._runners.values():
            with runner.cond:
                runner.closing = runner.hurry = True
                runner.cond.notify_all()
        deadline = time.monotonic() + timeout
        for runner in self._runners.values():
            if runner.thread is not None:
                runner.thread.join(max(0.0, deadline - time.monotonic()))
                if runner.thread.is_alive():
                    self._count(runner, TimeoutError(f"still recording {len(runner.queue)} events "
                                                     f"after {timeout:.0f} s; left behind"))

    def count_failure(self, name: str, exc: BaseException) -> None:
        """A failure to record met outside a sink's thread (e.g. MLflow refusing the parent run at
        start), counted against the sink `name` like its own."""
        runner = self._runners.get(name)
        if runner is None:
            runner = self._runners[name] = _Runner(_Absent(name), contextvars.copy_context())
        self._count(runner, exc)

    def lag_s(self) -> float:
        """How long the oldest unrecorded event has waited, over every sink (0: none waiting)."""
        now = time.monotonic()
        oldest = [r.oldest for r in self._runners.values() if r.oldest is not None]
        return round(now - min(oldest), 3) if oldest else 0.0

    def failures(self) -> dict[str, dict[str, object]]:
        """Per failing sink: how many batches failed and the last error (status.json
        `tracking_failures`); empty when every record was written."""
        return {name: {"failures": r.health.failures, "last_error": r.health.last_error}
                for name, r in self._runners.items() if r.health.failures}

    def health(self) -> dict[str, SinkHealth]:
        return {name: r.health for name, r in self._runners.items()}

    def gauges(self) -> dict[str, dict[str, Any]]:
        """Each sink's own figures (its `gauges()`)."""
        return {name: r.sink.gauges() for name, r in self._runners.items()}

    # --- each sink's thread ----------------------------------------------------------------------
    def _loop(self, runner: _Runner) -> None:
        try:
            if self._rebuild_from is not None:
                self._call(runner, lambda: runner.sink.rebuild(self._rebuild_from), 0)
            while True:
                batch = self._next_batch(runner)
                if batch is None:
                    break
                if batch:
                    self._call(runner, lambda b=batch: runner.sink.record(b), len(batch))
                with runner.cond:
                    runner.done += len(batch)
                    if not runner.queue:
                        runner.oldest = None
                    runner.cond.notify_all()
            self._call(runner, runner.sink.close, 0)
        except BaseException as exc:  # the hub's own loop failed, not a sink: the run's fatal path
            if self.on_fatal is None:
                raise
            self.on_fatal(f"sink {runner.sink.name}", exc)

    def _next_batch(self, runner: _Runner) -> list[Event] | None:
        """The events to record now (waiting up to the sink's interval for more), or None when
        closing with nothing left."""
        sink = runner.sink
        with runner.cond:
            while not runner.queue and not runner.closing:
                runner.hurry = False
                runner.cond.wait()
            if not runner.queue:
                return None
            due = (runner.oldest or time.monotonic()) + sink.interval_s
            while not runner.hurry and not runner.closing and time.monotonic() < due:
                runner.cond.wait(due - time.monotonic())
            batch = list(runner.queue)
            runner.queue.clear()
            return batch

    def _call(self, runner: _Runner, work: Callable[[], None], events: int) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            work()
        except Exception as exc:
            self._count(runner, exc)
            runner.failing += 1
            limit = runner.sink.critical_after
            if limit is not None and runner.failing >= limit and self.on_fatal is not None:
                self.on_fatal(f"sink {runner.sink.name} ({runner.failing} batches failed in a row)", exc)
        else:
            runner.failing = 0
            runner.health.recorded += events
            runner.health.batches += bool(events)
        finally:
            runner.health.busy_s += time.perf_counter() - wall
            runner.health.cpu_s += time.thread_time() - cpu

    def _count(self, runner: _Runner, exc: BaseException) -> None:
        runner.health.failures += 1
        text = f"{type(exc).__name__}: {exc}"
        runner.health.last_error = text if len(text) <= _ERROR_CHARS else text[:_ERROR_CHARS] + "…"
        log.error("sink %s failed (the run goes on; counted in status.json tracking_failures):\n%s",
                  runner.sink.name, "".join(traceback.format_exception(exc)))
