"""How fast an LLM endpoint answers, measured per call, and the timeout that follows from it.

Each answered call gives (prompt tokens, completion tokens, seconds the server spent on it); a
least-squares fit with non-negative terms, refitted without its outliers, keeps three numbers:
a fixed overhead, seconds per prompt token (prefill) and seconds per completion token
(generation). A call's timeout is `max(llm.timeout_s, safety x predicted seconds)` once
`min_calls` calls were measured (before that, `llm.timeout_s`): a slow model is waited for as long
as its pace says, and a hung server is cut at that bound instead of never.

Queueing: a server that serves `slots` requests at once (llama.cpp says so in `/props`;
llama-cpp-python serves one) makes the others wait. The seconds measured are then the server's
own, not the queue's: a call's service starts when it was sent or, when `slots` answers came in
since, at the `slots`-th latest of them (first come, first served). And a call sent behind
`slots` or more calls in flight gets their predicted time too (their typical answer length, shared
over the slots). When the server does not say its slots, the seconds measured are the whole
wait, queue included, so the fit learns the endpoint as loaded as it is.

>>> pace = Pace(safety=3.0, min_calls=3)
>>> for prompt, completion in [(400, 60), (800, 120), (400, 240), (1200, 60)]:
...     pace.observe(prompt, completion, 0.5 + prompt / 400 + completion / 60)
>>> round(pace.predict(400, 600), 1)
11.5
>>> pace.bound(400, 600, floor_s=5.0).why
"3x the 11.5 s this endpoint's pace predicts"
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SAFETY = 3.0  # a call may take this many times its predicted seconds
MIN_CALLS = 3  # calls measured before the pace sets timeouts
_KEEP = 64  # the latest calls the fit sees (the endpoint's pace drifts with its load)


@dataclass(frozen=True)
class Bound:
    """A call's timeout and why it is that long (said when a call outlasts it)."""

    seconds: float
    why: str


@dataclass(frozen=True)
class _InFlight:
    prompt: int
    max_tokens: int
    sent: float


class Pace:
    """One endpoint's measured speed and the calls it has in flight."""

    def __init__(self, safety: float = SAFETY, min_calls: int = MIN_CALLS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.safety, self.min_calls = safety, min_calls
        self.slots: int | None = None  # requests the server serves at once; None: unknown
        self._clock = clock
        self._samples: deque[tuple[int, int, float]] = deque(maxlen=_KEEP)
        self._answers: deque[float] = deque(maxlen=_KEEP)  # when the latest answers came
        self._in_flight: dict[int, _InFlight] = {}
        self._tickets = itertools.count()
        self._fit: tuple[float, float, float] | None = None  # overhead s, s/prompt token, s/completion token

    # --- what the calls report ---------------------------------------------------------------
    def sent(self, prompt: int, max_tokens: int) -> int:
        """A call is sent now; the ticket to report its end with."""
        ticket = next(self._tickets)
        self._in_flight[ticket] = _InFlight(prompt, max_tokens, self._clock())
        return ticket

    def dropped(self, ticket: int) -> None:
        """The call ended without an answer (nothing learned)."""
        self._in_flight.pop(ticket, None)

    def answered(self, ticket: int, prompt: int, completion: int) -> None:
        """The call got an answer with the server's usage: learn from the seconds it was served."""
        call = self._in_flight.pop(ticket, None)
        if call is None:
            return
        now = self._clock()
        start = call.sent
        if self.slots:
            since = [t for t in self._answers if call.sent < t <= now]
            if len(since) >= self.slots:
                start = sorted(since)[-self.slots]
        self._answers.append(now)
        if prompt or completion:
            self.observe(prompt, completion, now - start)

    def observe(self, prompt: int, completion: int, seconds: float) -> None:
        """One call served: `prompt` and `completion` tokens in `seconds`."""
        self._samples.append((prompt, completion, max(seconds, 0.0)))
        self._fit = None

    # --- what the calls ask ------------------------------------------------------------------
    def predict(self, prompt: int, completion: int) -> float | None:
        """Seconds the server takes for such a call; None before `min_calls` calls were measured."""
        fit = self._fitted()
        if fit is None:
            return None
        overhead, per_prompt, per_completion = fit
        return overhead + per_prompt * prompt + per_completion * completion

    def bound(self, prompt: int, max_tokens: int, floor_s: float) -> Bound:
        """The timeout of a call about to be sent: `floor_s` (llm.timeout_s) or `safety` x its
        predicted seconds with the calls queued ahead of it, whichever is longer."""
        own = self.predict(prompt, max_tokens)
        if own is None:
            waits = len(self._in_flight) // self.slots if self.slots else 0
            if waits:  # a server serving fewer at once than are sent: each call ahead gets its own
                return Bound(floor_s * (1 + waits),
                             f"llm.timeout_s for it and for each of the {waits} rounds of calls queued "
                             f"ahead ({len(self._in_flight)} in flight, {self.slots} served at once); "
                             f"this endpoint's pace is not measured yet")
            return Bound(floor_s, "llm.timeout_s; this endpoint's pace is not measured yet")
        ahead, queued = self._ahead()
        predicted = own + ahead
        if self.safety * predicted <= floor_s:
            return Bound(floor_s, f"llm.timeout_s; this endpoint's pace predicts {predicted:.1f} s")
        queue = f", {ahead:.1f} s of it for the {queued} calls ahead" if queued else ""
        return Bound(self.safety * predicted,
                     f"{self.safety:g}x the {predicted:.1f} s this endpoint's pace predicts{queue}")

    def rates(self) -> dict[str, float | None]:
        """The fit as a person reads it: prefill and generation tokens/s, overhead seconds."""
        fit = self._fitted()
        if fit is None:
            return {"prefill_tps": None, "generation_tps": None, "overhead_s": None}
        overhead, per_prompt, per_completion = fit
        return {"prefill_tps": round(1 / per_prompt, 1) if per_prompt > 0 else None,
                "generation_tps": round(1 / per_completion, 1) if per_completion > 0 else None,
                "overhead_s": round(overhead, 3)}

    def _ahead(self) -> tuple[float, int]:
        """Predicted seconds of the calls in flight that a new call waits behind, and how many."""
        if not self.slots or len(self._in_flight) < self.slots:
            return 0.0, 0
        completions = [c for _, c, _ in self._samples]
        typical = sum(completions) / len(completions) if completions else 0.0
        seconds = sum(self.predict(c.prompt, min(c.max_tokens, round(typical))) or 0.0
                      for c in self._in_flight.values())
        return seconds / self.slots, len(self._in_flight)

    def _fitted(self) -> tuple[float, float, float] | None:
        if len(self._samples) < self.min_calls:
            return None
        if self._fit is None:
            rows = np.array([(1.0, p, c) for p, c, _ in self._samples], dtype=float)
            seconds = np.array([s for _, _, s in self._samples], dtype=float)
            coef = _nonnegative_fit(rows, seconds)
            residual = np.abs(rows @ coef - seconds)
            keep = residual <= 3 * float(np.median(residual)) + 1e-9  # drop the outliers, fit again
            if keep.sum() >= self.min_calls and not keep.all():
                coef = _nonnegative_fit(rows[keep], seconds[keep])
            self._fit = (float(coef[0]), float(coef[1]), float(coef[2]))
        return self._fit


def _nonnegative_fit(rows: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: the most negative term dropped until none is."""
    active = [0, 1, 2]
    coef = np.zeros(3)
    while active:
        solution, *_ = np.linalg.lstsq(rows[:, active], seconds, rcond=None)
        if (solution >= 0).all():
            coef[active] = solution
            return coef
        active.pop(int(np.argmin(solution)))
    return coef
