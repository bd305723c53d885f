"""The sink hub: every sink on its own thread, fed events in batches, its failures counted.

`emit` is what the head calls on the flow's event loop: it appends the event to each sink's
queue and returns (microseconds). Each sink's thread waits for events, lets them gather for the
sink's `interval_s` (a stop or a `sync` cuts that short), then hands the batch to
`Sink.record`. A sink that raises keeps its place in the run: the failure is counted
(`failures()`: status.json `tracking_failures`), logged with its traceback to run.log, and the
batch stays at the head of the sink's queue, tried again after a backoff (0.5 s, doubling, at
most 30 s) together with what arrived since: a failed event is late, never counted as recorded,
and the lag (`lag_s`) shows it waiting. Memory stays bounded: a sink holds at most its
`max_pending` events; beyond that the oldest are dropped and counted as never recorded, as are
the events a sink still fails to write after its last tries at the close. A failure that is a
full disk (infra/disk_full.py) is not retried: it goes at once to `on_fatal`, the engine's one
fatal path, as a `DiskFull`, since nothing more could be recorded. `sync` waits until every
event emitted so far is recorded or has just been tried and failed (the end of a run, a report);
`close` records what is left, closes the sinks and joins their threads. An error in the hub's own
thread loop (not in a sink) goes to `on_fatal` too.
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

from evoforge.infra.disk_full import DiskFull, disk_full_error
from evoforge.infra.nodes import Node
from evoforge.stages.sinks.base import Event, Sink

log = logging.getLogger("evoforge.sinks")

_ERROR_CHARS = 300
BACKOFF_S = (0.5, 30.0)  # the first retry's wait, doubling up to the longest
CLOSE_TRIES = 4  # attempts at the close (with the backoff between) before a sink's events are given up


@dataclass
class SinkHealth:
    """What one sink has done: events recorded, failures, the last error, seconds spent, events
    still waiting (`pending`) and events given up (`never_recorded`)."""

    recorded: int = 0
    batches: int = 0
    failures: int = 0
    last_error: str | None = None
    busy_s: float = 0.0
    cpu_s: float = 0.0
    pending: int = 0
    never_recorded: int = 0


@dataclass
class _Runner:
    """One sink's queue (each event with its emit time), thread and health."""

    sink: Sink
    context: contextvars.Context
    queue: deque[tuple[float, Event]] = field(default_factory=deque)
    cond: threading.Condition = field(default_factory=threading.Condition)
    health: SinkHealth = field(default_factory=SinkHealth)
    emitted: int = 0
    done: int = 0  # events recorded, dropped or given up: nothing more will be done with them
    attempts: int = 0  # record calls made (a sync waits for one after it began)
    failing: int = 0  # batches failed in a row
    retry_at: float = 0.0  # monotonic: no attempt before (the backoff after a failure)
    oldest: float | None = None  # when the oldest unrecorded event was emitted (monotonic)
    in_flight: bool = False  # a batch is out of the queue, being recorded
    full_disk: bool = False  # the last failure was a full disk
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
                runner.queue.append((now, event))
                runner.emitted += 1
                if runner.oldest is None:
                    runner.oldest = now
                self._bound(runner)
                if runner.sink.urgent(event):
                    runner.hurry = True
                runner.cond.notify()

    def sync(self, timeout: float | None = None) -> bool:
        """Wait until every event emitted before the call is recorded, or was tried after the call
        and failed (it stays queued, retried later); False when `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for runner in self._runners.values():
            with runner.cond:
                target, attempts = runner.emitted, runner.attempts
                runner.hurry = True
                runner.cond.notify_all()
                while (runner.done < target and not (runner.failing and runner.attempts > attempts)
                       and runner.thread is not None and runner.thread.is_alive()):
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    runner.cond.wait(left)
        return True

    def close(self, timeout: float = 120.0) -> None:
        """Record what is queued (a failing sink: a few tries more), close every sink, join the
        threads; what a sink could not write is counted as never recorded."""
        for runner in self._runners.values():
            with runner.cond:
                runner.closing = runner.hurry = True
                runner.cond.notify_all()
        deadline = time.monotonic() + timeout
        for runner in self._runners.values():
            if runner.thread is not None:
                runner.thread.join(max(0.0, deadline - time.monotonic()))
                if runner.thread.is_alive():
                    with runner.cond:
                        left = runner.emitted - runner.done
                    runner.health.never_recorded += left
                    self._count(runner, TimeoutError(f"still recording {left} events "
                                                     f"after {timeout:.0f} s; left behind"))

    def count_failure(self, name: str, exc: BaseException) -> None:
        """A failure to record met outside a sink's thread (e.g. MLflow refusing the parent run at
        start), counted against the sink `name` like its own."""
        runner = self._runners.get(name)
        if runner is None:
            runner = self._runners[name] = _Runner(_Absent(name), contextvars.copy_context())
        self._count(runner, exc)

    def lag_s(self) -> float:
        """How long the oldest unrecorded event has waited, over every sink (0: none waiting); an
        event whose batch failed is still waiting."""
        now = time.monotonic()
        oldest = [r.oldest for r in self._runners.values() if r.oldest is not None]
        return round(now - min(oldest), 3) if oldest else 0.0

    def failures(self) -> dict[str, dict[str, object]]:
        """Per sink that failed or gave events up: how many batches failed, the last error and the
        events never recorded (status.json `tracking_failures`); empty when every record was written."""
        return {name: {"failures": r.health.failures, "last_error": r.health.last_error,
                       "never_recorded": r.health.never_recorded}
                for name, r in self._runners.items() if r.health.failures or r.health.never_recorded}

    def never_recorded(self) -> dict[str, int]:
        """Per sink, the events it never recorded (dropped over its bound, or given up at the close)."""
        return {name: r.health.never_recorded for name, r in self._runners.items() if r.health.never_recorded}

    def health(self) -> dict[str, SinkHealth]:
        for runner in self._runners.values():
            runner.health.pending = runner.emitted - runner.done
        return {name: r.health for name, r in self._runners.items()}

    def gauges(self) -> dict[str, dict[str, Any]]:
        """Each sink's own figures (its `gauges()`)."""
        return {name: r.sink.gauges() for name, r in self._runners.items()}

    # --- each sink's thread ----------------------------------------------------------------------
    def _loop(self, runner: _Runner) -> None:
        try:
            if self._rebuild_from is not None:
                self._call(runner, lambda: runner.sink.rebuild(self._rebuild_from), 0)
            tries_at_close = 0
            while True:
                batch = self._next_batch(runner)
                if batch is None:
                    break
                events = [event for _, event in batch]
                ok = self._call(runner, lambda b=events: runner.sink.record(b), len(batch))
                if not ok and runner.closing:
                    tries_at_close += 1
                give_up = not ok and runner.closing and (tries_at_close >= CLOSE_TRIES or runner.full_disk)
                with runner.cond:
                    runner.in_flight = False
                    runner.attempts += 1
                    if ok:
                        runner.done += len(batch)
                    elif give_up:  # the close's last try failed: these events are never recorded
                        runner.done += len(batch) + len(runner.queue)
                        runner.health.never_recorded += len(batch) + len(runner.queue)
                        runner.queue.clear()
                        log.error("sink %s: %d events never recorded (it kept failing at the close)",
                                  runner.sink.name, runner.health.never_recorded)
                    else:  # late, not lost: first in line for the next try, after the backoff
                        runner.queue.extendleft(reversed(batch))
                        runner.hurry = False
                        low, high = BACKOFF_S
                        wait = min(high, low * 2 ** (runner.failing - 1))
                        runner.retry_at = time.monotonic() + (min(wait, 2.0) if runner.closing else wait)
                        self._bound(runner)
                    runner.oldest = runner.queue[0][0] if runner.queue else None
                    runner.cond.notify_all()
            self._call(runner, runner.sink.close, 0)
        except BaseException as exc:  # the hub's own loop failed, not a sink: the run's fatal path
            if self.on_fatal is None:
                raise
            self.on_fatal(f"sink {runner.sink.name}", exc)

    def _bound(self, runner: _Runner) -> None:
        """Drop the oldest queued events beyond the sink's `max_pending` (counted as never
        recorded); called with the runner's lock held."""
        over = len(runner.queue) - runner.sink.max_pending
        if over <= 0:
            return
        for _ in range(over):
            runner.queue.popleft()
        runner.done += over
        runner.health.never_recorded += over
        if not runner.in_flight:
            runner.oldest = runner.queue[0][0] if runner.queue else None
        log.error("sink %s holds more than %d unrecorded events: the %d oldest dropped (never recorded)",
                  runner.sink.name, runner.sink.max_pending, over)

    def _next_batch(self, runner: _Runner) -> list[tuple[float, Event]] | None:
        """The events to record now (waiting up to the sink's interval for more, and out a
        failure's backoff), or None when closing with nothing left."""
        sink = runner.sink
        with runner.cond:
            while True:
                if not runner.queue:
                    if runner.closing:
                        return None
                    runner.hurry = False
                    runner.cond.wait()
                    continue
                now = time.monotonic()
                if now >= runner.retry_at and (runner.hurry or runner.closing
                                               or now >= runner.queue[0][0] + sink.interval_s):
                    break
                due = runner.retry_at if (runner.hurry or runner.closing) else max(
                    runner.retry_at, runner.queue[0][0] + sink.interval_s)
                runner.cond.wait(max(0.0, due - now))
            batch = list(runner.queue)
            runner.queue.clear()
            runner.in_flight = True
            return batch

    def _call(self, runner: _Runner, work: Callable[[], None], events: int) -> bool:
        """Run one piece of a sink's work; False (counted, logged) when it raised."""
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            work()
        except Exception as exc:
            self._count(runner, exc)
            runner.failing += 1
            full = disk_full_error(exc)
            runner.full_disk = full is not None
            limit = runner.sink.critical_after
            if self.on_fatal is not None and full is not None:
                self.on_fatal(f"sink {runner.sink.name} (the disk is full)", DiskFull.of(full))
            elif limit is not None and runner.failing >= limit and self.on_fatal is not None:
                self.on_fatal(f"sink {runner.sink.name} ({runner.failing} batches failed in a row)", exc)
            return False
        else:
            runner.failing = 0
            runner.health.recorded += events
            runner.health.batches += bool(events)
            return True
        finally:
            runner.health.busy_s += time.perf_counter() - wall
            runner.health.cpu_s += time.thread_time() - cpu

    def _count(self, runner: _Runner, exc: BaseException) -> None:
        runner.health.failures += 1
        text = f"{type(exc).__name__}: {str(exc).strip().partition(chr(10))[0]}"  # its first line
        runner.health.last_error = text if len(text) <= _ERROR_CHARS else text[:_ERROR_CHARS] + "…"
        log.error("sink %s failed (the run goes on; counted in status.json tracking_failures):\n%s",
                  runner.sink.name, "".join(traceback.format_exception(exc)))
