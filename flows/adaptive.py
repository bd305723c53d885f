"""Adaptive workers (FlashEvolve): every `tau` seconds, move workers toward the slow stage.

A stage's rate is its capacity in items per second: workers x (items finished / busy
worker-seconds), smoothed with an EMA. A stage below half the median rate with work waiting
gains a worker; one above twice the median gives one back, within [min, max]. Every decision is
logged and kept for status.json.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Protocol

from evoforge.flows.demand import Ema
from evoforge.infra.config import AdaptiveConfig

log = logging.getLogger("evoforge.adaptive")


class Staffed(Protocol):
    """What the controller needs from an engine."""

    def stage_names(self) -> list[str]: ...
    def workers(self, stage: str) -> int: ...
    def bounds(self, stage: str) -> tuple[int, int]: ...  # (min, max) workers
    def work_waiting(self, stage: str) -> bool: ...
    def meter(self, stage: str) -> tuple[int, float]: ...  # (items finished, busy worker-seconds)
    def add_worker(self, stage: str) -> None: ...
    def remove_worker(self, stage: str) -> None: ...


@dataclass
class AdaptiveController:
    """The rate-balancing rule, separate from the clock so that tests can step it."""

    cfg: AdaptiveConfig
    rates: dict[str, Ema] = field(default_factory=dict)
    last: dict[str, tuple[int, float]] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)

    def measure(self, engine: Staffed) -> dict[str, float]:
        """Update each stage's smoothed capacity from what it finished since the last step."""
        out = {}
        for stage in engine.stage_names():
            done, busy = engine.meter(stage)
            done0, busy0 = self.last.get(stage, (0, 0.0))
            self.last[stage] = (done, busy)
            if done > done0 and busy > busy0:
                ema = self.rates.setdefault(stage, Ema(alpha=0.5))
                ema.add(engine.workers(stage) * (done - done0) / (busy - busy0))
            if stage in self.rates and self.rates[stage].value is not None:
                out[stage] = self.rates[stage].value
        return out

    def step(self, engine: Staffed) -> list[str]:
        """One control step; returns the decisions taken."""
        rates = self.measure(engine)
        if len(rates) < 2:
            return []
        median = statistics.median(rates.values())
        taken = []
        for stage, rate in rates.items():
            low, high = engine.bounds(stage)
            n = engine.workers(stage)
            if rate < 0.5 * median and engine.work_waiting(stage) and n < high:
                engine.add_worker(stage)
                taken.append(f"+1 {stage} ({n}->{n + 1}): {rate:.2f}/s < half the median {median:.2f}/s")
            elif rate > 2 * median and n > low:
                engine.remove_worker(stage)
                taken.append(f"-1 {stage} ({n}->{n - 1}): {rate:.2f}/s > twice the median {median:.2f}/s")
        for decision in taken:
            log.info("adaptive: %s", decision)
            self.decisions.append(f"{time.strftime('%H:%M:%S')} {decision}")
        return taken

    async def run(self, engine: Staffed) -> None:
        """Step every tau seconds until cancelled."""
        while True:
            await asyncio.sleep(self.cfg.tau_s)
            self.step(engine)
