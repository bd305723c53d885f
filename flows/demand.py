"""How many research calls are worth having in flight, so that proposals do not pile up stale.

By Little's law the evaluators consume `engineer_workers / eval_s` candidates per second, so
`rate * llm_s` concurrent LLM calls keep them fed; more only queues candidates designed against
an ever older pool. Latencies are smoothed with an exponential moving average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Ema:
    """Exponential moving average; None until the first sample."""

    alpha: float = 0.2
    value: float | None = None

    def add(self, sample: float) -> None:
        self.value = sample if self.value is None else self.alpha * sample + (1 - self.alpha) * self.value


@dataclass
class ResearchDemand:
    """The research concurrency that keeps `engineers` evaluators busy, within [1, max_research]."""

    max_research: int
    engineers: int
    llm_s: Ema
    eval_s: Ema

    @classmethod
    def create(cls, max_research: int, engineers: int) -> ResearchDemand:
        return cls(max_research, engineers, Ema(), Ema())

    def target(self) -> int:
        if self.llm_s.value is None or self.eval_s.value is None:
            return self.max_research
        rate = self.engineers / max(self.eval_s.value, 1e-3)
        wanted = math.ceil(rate * self.llm_s.value) + self.engineers
        return max(1, min(self.max_research, wanted))
