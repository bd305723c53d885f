"""The circuit breaker of an LLM endpoint: while the endpoint is down the run waits, instead of
failing node after node, and asks again every few seconds until it answers or the run gives up.

A circuit is **closed** while the endpoint answers. It **opens** after `failures` failed attempts
in a row (429, 5xx, timeouts, refused connections), or when a call has spent its retries and no
request sent since its first failure was answered. While open, calls wait before sending
anything, and a prober sends a cheap GET every `probe_s` (**half-open** while it is out; the
backend's probe: `/v1/models`, else `/health`, which never queue behind generation):
an answer closes the circuit and the waiting calls go on; an outage longer than `give_up_s` ends
every waiting call with `LLMOutage`, which stops the run (resumable) instead of failing a node.

Busy is not down: when the failures are timeouts, the circuit probes before it opens. A server that
answers the probe but not the chat calls in time is **busy** (`busy`, status.json's `llm_state`):
the circuit stays closed, the calls that timed out fail with reason `timeout`, and the run goes on;
the next answered call ends the busy spell. Only a refused, hung or failing probe opens it.
`Breakers` sees a run's circuits together: the run is paused while every one of them is open.

>>> import asyncio
>>> async def down() -> str | None:
...     return "APIConnectionError"
>>> async def demo() -> tuple[str, int]:
...     circuit = Circuit("http://llm/v1", down, failures=2, probe_s=0.01, give_up_s=0.05)
...     circuit.failure("APIConnectionError")
...     circuit.failure("APIConnectionError")
...     try:
...         await circuit.wait_closed()
...     except LLMOutage:
...         pass
...     await circuit.close()
...     return circuit.state, circuit.opened
>>> asyncio.run(demo())
('open', 1)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

log = logging.getLogger("evoforge.llm.circuit")

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

Probe = Callable[[], Awaitable[str | None]]  # None: the endpoint answered; else why it did not


class LLMOutage(RuntimeError):
    """An LLM endpoint stayed down past `llm.circuit.give_up_s`: the run stops and can be resumed.

    Not an LLMError on purpose: no stage records it on a node (the server was down, not the
    candidate wrong); the engine sends it down its fatal path."""


class EndpointDown(Exception):  # noqa: N818 - a signal between two backends, not an error
    """This endpoint's circuit is open and the caller asked not to wait (a router: it has others)."""


class _Signal:
    """Wakes every coroutine waiting on it; each waiter's future lives on its own running loop."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()

    async def wait(self, limit_s: float | None) -> None:
        """Return when notified or after `limit_s` seconds, whichever comes first."""
        future = asyncio.get_running_loop().create_future()
        self._waiters.add(future)
        try:
            await asyncio.wait({future}, timeout=limit_s)
        finally:
            self._waiters.discard(future)

    def notify(self) -> None:
        for future in self._waiters:
            if not future.done():
                future.set_result(None)


class Circuit:
    """The breaker of one endpoint: closed, open (calls wait, a prober asks) or half-open."""

    def __init__(self, name: str, probe: Probe, failures: int = 5, probe_s: float = 5.0,
                 give_up_s: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.failures, self.probe_s, self.give_up_s = name, failures, probe_s, give_up_s
        self.state = CLOSED
        self.opened = 0  # times this circuit opened
        self.probes = 0  # probes sent while open
        self.down_s = 0.0  # seconds open, over the outages that ended
        self.last_error = ""
        self.gave_up = False
        self.busy = False  # the endpoint answers its probe but not the chat calls in time
        self._probe, self._clock = probe, clock
        self._streak = 0  # failed attempts since the last answer
        self._opened_at = 0.0
        self._answered_sent_at = float("-inf")  # when the latest answered request was sent
        self._changed = _Signal()
        self._listeners: list[Callable[[], None]] = []
        self._prober: asyncio.Task[None] | None = None
        self._checker: asyncio.Task[None] | None = None

    # --- what the calls report ---------------------------------------------------------------
    def answered(self, sent_at: float) -> None:
        """A request sent at `sent_at` (this circuit's clock) got an answer, good or bad."""
        self._answered_sent_at = max(self._answered_sent_at, sent_at)
        self._streak = 0
        self.busy = False
        if self.state != CLOSED and sent_at >= self._opened_at:  # sent while open: the probe
            self._close()
        self._changed.notify()

    def failure(self, reason: str, timed_out: bool = False) -> None:
        """An attempt got no answer (`reason`: why); `failures` of them in a row open the circuit,
        or, when they are timeouts (`timed_out`), have it probe first: busy or down."""
        self.last_error = reason
        self._streak += 1
        if self.state == CLOSED and self._streak >= self.failures:
            if not timed_out:
                self._open(f"{self._streak} failed attempts in a row")
            elif self._checker is None or self._checker.done():
                self._checker = asyncio.get_running_loop().create_task(self._busy_or_down(reason))
        self._changed.notify()

    async def down_or_busy(self, reason: str, timed_out: bool) -> bool:
        """A call spent its retries and nobody got an answer meanwhile: True when the endpoint is
        down (the circuit opens), False when its attempts timed out but it answers its probe (busy)."""
        if timed_out and await self._answers_probe(reason):
            return False
        self.trip(reason)
        return True

    async def _busy_or_down(self, reason: str) -> None:
        """Timeouts in a row: busy when the probe answers, else open the circuit."""
        if not await self._answers_probe(reason) and self.state == CLOSED:
            self._open(f"{self._streak} timed-out attempts in a row and no answer to the probe")

    async def _answers_probe(self, reason: str) -> bool:
        """Probe now: True (and busy) when the endpoint answers it."""
        error = await self._probe_error()
        if error is not None:
            self.last_error = f"{reason}; probe: {error}"
            return False
        if not self.busy:
            log.warning("LLM endpoint %s is busy, not down: it answers its probe but its calls time "
                        "out (%s)", self.name, reason)
        self.busy, self.last_error = True, reason
        self._tell()
        return True

    def trip(self, reason: str) -> None:
        """Open the circuit now: a call spent its retries and nobody got an answer meanwhile."""
        self.last_error = reason
        if self.state == CLOSED:
            self._open("a call spent its retries and no other request was answered")
        self._changed.notify()

    def now(self) -> float:
        return self._clock()

    # --- what the calls wait for -------------------------------------------------------------
    async def wait_closed(self) -> float:
        """Return once the circuit is closed (at once when it is); the seconds waited. Raises
        LLMOutage when the outage outlasts `give_up_s`."""
        if self.state == CLOSED:
            return 0.0
        started = self._clock()
        while self.state != CLOSED:
            remaining = self._opened_at + self.give_up_s - self._clock()
            if self.gave_up or remaining <= 0:
                if not self.gave_up:
                    log.error("LLM endpoint %s down for %.0f s: giving up (llm.circuit.give_up_s)",
                              self.name, self.give_up_s)
                self.gave_up = True
                raise LLMOutage(self.outage_message())
            await self._changed.wait(remaining)
        return self._clock() - started

    async def answered_since(self, sent_at: float, within: float) -> bool:
        """True once a request sent at or after `sent_at` is answered; False when the circuit
        opens first or `within` seconds pass without one."""
        deadline = self._clock() + within
        while self._answered_sent_at < sent_at:
            remaining = deadline - self._clock()
            if self.state != CLOSED or remaining <= 0:
                return False
            await self._changed.wait(remaining)
        return True

    def outage_message(self) -> str:
        """The one line a user reads when the run gives up on this endpoint."""
        return (f"the LLM server at {self.name} has not answered for {self.give_up_s:g} s "
                f"(llm.circuit.give_up_s; last error: {self.last_error or 'none'}); the run stopped "
                f"with its folder intact: run the same `evoforge run` again to resume it")

    # --- state changes -----------------------------------------------------------------------
    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on the event loop) whenever the circuit opens or closes."""
        self._listeners.append(callback)

    def _open(self, why: str) -> None:
        self.state, self.opened, self._opened_at = OPEN, self.opened + 1, self._clock()
        log.warning("LLM endpoint %s looks down (%s; last error: %s): new LLM calls wait, probing "
                    "every %g s, giving up after %g s", self.name, why, self.last_error,
                    self.probe_s, self.give_up_s)
        self._prober = asyncio.get_running_loop().create_task(self._probe_until_closed())
        self._tell()

    def _close(self) -> None:
        outage = self._clock() - self._opened_at
        self.state, self.down_s = CLOSED, self.down_s + outage
        log.warning("LLM endpoint %s answers again after %.1f s down (%d probes): resuming",
                    self.name, outage, self.probes)
        self._tell()

    def _tell(self) -> None:
        for callback in self._listeners:
            callback()

    async def _probe_error(self) -> str | None:
        """One probe: None when the endpoint answered, else why not (a probe that raised counts as
        unanswered; its traceback goes to run.log)."""
        try:
            return await self._probe()
        except Exception as exc:  # noqa: BLE001 - logged with its traceback, and the reason is kept
            log.exception("probe of LLM endpoint %s raised", self.name)
            return f"the probe raised {type(exc).__name__}"

    async def _probe_until_closed(self) -> None:
        """Every `probe_s` while open: one probe (half-open while it is out)."""
        while self.state != CLOSED:
            await asyncio.sleep(self.probe_s)
            if self.state == CLOSED:  # a call that was in flight when the circuit opened answered
                return
            self.state, self.probes = HALF_OPEN, self.probes + 1
            sent = self._clock()
            error = await self._probe_error()
            if error is None:
                self.answered(sent)
            else:
                self.state, self.last_error = OPEN, error
                self._changed.notify()

    async def close(self) -> None:
        """Stop probing (the run is over)."""
        for task in (self._prober, self._checker):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._prober = self._checker = None

    def outage_s(self) -> float:
        """Seconds the current outage has lasted (0 while closed)."""
        return 0.0 if self.state == CLOSED else self._clock() - self._opened_at


class Breakers:
    """A run's circuits seen together: the run is paused while every endpoint's circuit of one
    group is open (with several endpoints, calls go to the ones that answer). The proposer's
    endpoints are a group; a task model on other endpoints (`task_model.llm`) is another, so that
    a run whose task model is down draws no new item either."""

    def __init__(self, circuits: Sequence[Circuit] = (), *more: Sequence[Circuit]) -> None:
        self.groups = [list(group) for group in (circuits, *more) if group]
        self.circuits = list(dict.fromkeys(c for group in self.groups for c in group))
        self.pauses = 0  # times the run paused
        self._paused_since: float | None = None
        self._paused_s = 0.0
        self._listeners: list[Callable[[], None]] = []
        for circuit in self.circuits:
            circuit.listen(self._changed)

    @property
    def paused(self) -> bool:
        """True while no endpoint of a group is closed: no new LLM work may start."""
        return any(all(c.state != CLOSED for c in group) for group in self.groups)

    def listen(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever a circuit opens or closes."""
        self._listeners.append(callback)

    def _changed(self) -> None:
        now = time.monotonic()
        if self.paused and self._paused_since is None:
            self.pauses, self._paused_since = self.pauses + 1, now
        elif not self.paused and self._paused_since is not None:
            self._paused_s += now - self._paused_since
            self._paused_since = None
        for callback in self._listeners:
            callback()

    def paused_s(self) -> float:
        """Seconds the run has been paused, the current pause included."""
        ongoing = time.monotonic() - self._paused_since if self._paused_since is not None else 0.0
        return self._paused_s + ongoing

    def gauges(self) -> dict[str, Any]:
        """What status.json shows: the circuit state(s), `llm_state` (up, busy: answers its probe
        but not the calls in time, down: paused), pauses, seconds paused, the last error."""
        if not self.circuits:
            return {}
        states = [c.state for c in self.circuits]
        state = states[0] if len(set(states)) == 1 else \
            f"{sum(s != CLOSED for s in states)} of {len(states)} open"
        llm_state = "down" if self.paused else "busy" if any(c.busy for c in self.circuits) else "up"
        return {"llm_circuit": state, "llm_state": llm_state, "llm_paused": self.paused,
                "llm_pauses": self.pauses,
                "llm_paused_s": round(self.paused_s(), 3),
                "llm_circuit_opened": sum(c.opened for c in self.circuits),
                "llm_probes": sum(c.probes for c in self.circuits),
                "llm_last_error": next((c.last_error for c in self.circuits if c.last_error), "")}
