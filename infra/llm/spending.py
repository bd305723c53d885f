"""Dollars spent on LLM calls, held to `budget.max_cost_usd`.

Every OpenAI-compatible backend of a run shares one `Spending`: before a call is sent it checks
that money is left (a call refused for the cap fails like any LLM call, with the reason, and the
run stops issuing work), and after an answer it adds the call's price (`llm.prices`, per million
tokens). So the cap is overrun by at most the calls already in flight when it was reached.

>>> from evoforge.infra.config import ModelPrice
>>> spend = Spending(0.01, {"m": ModelPrice(input_per_mtok=1.0, output_per_mtok=4.0)})
>>> spend.add("m", 6_000, 1_000)
>>> spend.spent_usd, spend.exhausted
(0.01, True)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from evoforge.infra.config import ConfigError, ModelPrice
from evoforge.infra.llm.pricing import call_cost
from evoforge.infra.llm.types import LLMError

__all__ = ["SpendingCapReached", "Spending"]


class SpendingCapReached(LLMError):
    """A call not sent: the run's money budget is spent."""


class Spending:
    """USD spent by the run's LLM calls against a cap (None: no cap, only counted)."""

    def __init__(self, cap_usd: float | None, prices: Mapping[str, ModelPrice]) -> None:
        self.cap_usd, self.prices = cap_usd, dict(prices)
        self.spent_usd = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    @property
    def exhausted(self) -> bool:
        return self.cap_usd is not None and self.spent_usd >= self.cap_usd

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
            raise SpendingCapReached(f"budget.max_cost_usd reached (${self.spent_usd:.4f} of "
                                     f"${self.cap_usd:.4f} spent): the call was not sent")

    def add(self, model: str, tokens_in: int, tokens_out: int) -> None:
        """Charge one answered call."""
        cost = call_cost(self.prices, model, tokens_in, tokens_out) or 0.0
        with self._lock:
            self.spent_usd = round(self.spent_usd + cost, 10)
            self.calls += 1

    def status(self) -> dict[str, float | int | None]:
        """status.json's `spending`: dollars spent, the cap and what is left, priced calls."""
        left = None if self.cap_usd is None else round(max(0.0, self.cap_usd - self.spent_usd), 6)
        return {"spent_usd": round(self.spent_usd, 6), "cap_usd": self.cap_usd, "left_usd": left,
                "calls": self.calls}
