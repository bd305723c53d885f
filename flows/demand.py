"""How many research calls are worth having in flight, so that proposals do not pile up stale.

By Little's law the evaluators consume `engineer_workers / eval_s` candidates per second, so
`rate * llm_s` concurrent LLM calls keep them fed; more only queues candidates designed against
an ever older pool. Latencies are smoothed with an exponential moving average.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Ema:
    """Exponential moving average; None until the first sample."""

    alpha: float = 0.2
    value: float | None = None

    def add(self, sample: float) -> None:
        self.value = sample if self.value is None else self.alpha * sample + (1 - self.alpha) * self.value


@dataclass
class ResearchDemand:
    """The research concurrency that keeps the evaluators busy, within [1, research workers]."""

    llm_s: Ema = field(default_factory=Ema)
    eval_s: Ema = field(default_factory=Ema)

    def target(self, research_workers: int, engineers: int) -> int:
        """How many research calls to keep in flight, given the stages' current worker counts."""
        if self.llm_s.value is None or self.eval_s.value is None:
            return research_workers
        rate = engineers / max(self.eval_s.value, 1e-3)
        wanted = math.ceil(rate * self.llm_s.value) + engineers
        return max(1, min(research_workers, wanted))
