"""Dollars and tokens spent on LLM calls over a run's sessions, held to `budget.max_cost_usd`.

Every OpenAI-compatible backend of a run shares one `Spending`. Before a call is sent it reserves
the call's worst case (its estimated prompt tokens at the input price plus `max_tokens` at the
output price); a call whose worst case does not fit in what is left is refused (it fails like any
LLM call, with the reason, and the run stops on its money budget), and one that fits alone but
not beside the calls in flight waits for them. After the answer the reservation settles to the
server's usage (a truncated or unusable answer's too). So the cap holds even with calls in flight.
The run's totals live in `spending.json` in the run folder (rewritten atomically after each
call), so a resumed run starts from what its earlier sessions spent.

>>> from evoforge.infra.config import ModelPrice
>>> spend = Spending(0.01, {"m": ModelPrice(input_per_mtok=1.0, output_per_mtok=4.0)})
>>> spend.add("m", 6_000, 1_000)
>>> spend.spent_usd, spend.exhausted
(0.01, True)
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from evoforge.infra.config import ConfigError, ModelPrice
from evoforge.infra.llm.pricing import call_cost
from evoforge.infra.llm.types import LLMError
from evoforge.infra.runfiles import read_json, write_atomic

__all__ = ["SPENDING_FILE", "SpendingCapReached", "Spending", "prompt_tokens"]

SPENDING_FILE = "spending.json"  # in the run folder: the run's totals over its sessions
_TOTALS = ("spent_usd", "calls", "tokens_in", "tokens_out")


class SpendingCapReached(LLMError):
    """A call not sent: the run's money budget is spent."""


def prompt_tokens(messages: list[dict[str, str]]) -> int:
    """A generous estimate of a prompt's tokens: a token per 3 characters, plus 8 per message.

    BPE tokenizers give ~4 characters a token on English and code, so this errs high, as a
    worst case should.

    >>> prompt_tokens([{"role": "user", "content": "x" * 30}])
    18
    """
    return sum(math.ceil(len(m.get("content") or "") / 3) + 8 for m in messages)


class Spending:
    """USD and tokens spent by the run's LLM calls against a cap (None: no cap, only counted)."""

    def __init__(self, cap_usd: float | None, prices: Mapping[str, ModelPrice]) -> None:
        self.cap_usd, self.prices = cap_usd, dict(prices)
        self.spent_usd = 0.0  # the run's, earlier sessions included
        self.calls = self.tokens_in = self.tokens_out = 0
        self.reserved_usd = 0.0  # the worst cases of the calls in flight
        self.refused = False  # a call's worst case did not fit in what was left
        self.earlier: dict[str, float | int] = dict.fromkeys(_TOTALS, 0)
        self._path: Path | None = None
        self._lock = threading.Lock()

    @property
    def exhausted(self) -> bool:
        return self.cap_usd is not None and (self.refused or self.spent_usd >= self.cap_usd)

    def resume(self, path: Path) -> None:
        """Take over the totals of the run's earlier sessions kept in `path`, and keep them there."""
        earlier = read_json(path) or {}
        with self._lock:
            for key in _TOTALS:
                value = earlier.get(key, 0)
                self.earlier[key] = value if isinstance(value, (int, float)) else 0
            self.spent_usd = round(float(self.earlier["spent_usd"]) + self.spent_usd, 10)
            self.calls += int(self.earlier["calls"])
            self.tokens_in += int(self.earlier["tokens_in"])
            self.tokens_out += int(self.earlier["tokens_out"])
            self._path = path

    def require_prices(self, models: Iterable[str]) -> None:
        """With a cap, every model the run calls must have a price: a one-line error otherwise."""
        if self.cap_usd is None:
            return
        for model in models:
            if not model:
                raise ConfigError("budget.max_cost_usd: name the model (llm.model) so that llm.prices "
                                  "can price it")
            if model not in self.prices:
                raise ConfigError(f"budget.max_cost_usd: llm.prices has no price for model '{model}'")

    def check(self) -> None:
        """Raise SpendingCapReached when the cap is spent (before a call is sent)."""
        if self.exhausted:
            raise self._refusal("")

    def reserve(self, model: str, messages: list[dict[str, str]], max_tokens: int) -> float | None:
        """Hold the call's worst case (USD, 0.0 without a cap or price) before it is sent; None when
        it fits alone but not beside the calls in flight (wait and ask again); SpendingCapReached
        when it does not fit in what is left."""
        worst = call_cost(self.prices, model, prompt_tokens(messages), max_tokens) or 0.0
        with self._lock:
            if self.cap_usd is None:
                return 0.0
            if self.exhausted or self.spent_usd + worst > self.cap_usd:
                self.refused = True
                raise self._refusal(f"; this call could cost ${worst:.4f}")
            if self.spent_usd + self.reserved_usd + worst > self.cap_usd:
                return None
            self.reserved_usd += worst
            return worst

    def settle(self, held: float, model: str, tokens_in: int, tokens_out: int) -> None:
        """Release a call's reservation and charge what the server counted (0, 0: nothing came)."""
        with self._lock:
            self.reserved_usd = max(0.0, self.reserved_usd - held)
        if tokens_in or tokens_out:
            self.add(model, tokens_in, tokens_out)

    def add(self, model: str, tokens_in: int, tokens_out: int) -> None:
        """Charge one answered call and keep the run's totals in the run folder."""
        cost = call_cost(self.prices, model, tokens_in, tokens_out) or 0.0
        with self._lock:
            self.spent_usd = round(self.spent_usd + cost, 10)
            self.calls += 1
            self.tokens_in += tokens_in
            self.tokens_out += tokens_out
            if self._path is not None:
                write_atomic(self._path, json.dumps(self._totals()))

    def status(self) -> dict[str, object]:
        """status.json's `spending`: the run's dollars (all sessions), the cap and what is left,
        priced calls and tokens; `session` has this session's share."""
        with self._lock:
            left = None if self.cap_usd is None else round(max(0.0, self.cap_usd - self.spent_usd), 6)
            totals = self._totals()
            session = {key: round(totals[key] - self.earlier[key], 6) if key == "spent_usd"
                       else int(totals[key] - self.earlier[key]) for key in _TOTALS}
            return {"spent_usd": round(self.spent_usd, 6), "cap_usd": self.cap_usd, "left_usd": left,
                    "calls": self.calls, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                    "reserved_usd": round(self.reserved_usd, 6), "session": session}

    def _totals(self) -> dict[str, float | int]:
        return {"spent_usd": self.spent_usd, "calls": self.calls, "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out}

    def _refusal(self, detail: str) -> SpendingCapReached:
        return SpendingCapReached(f"budget.max_cost_usd reached (${self.spent_usd:.4f} of "
                                  f"${self.cap_usd:.4f} spent{detail}): the call was not sent")
