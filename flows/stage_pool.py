"""One stage's worker pool: its input queue, its workers, and its meters."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from evoforge.stages.pipeline.stage import Stage, WorkerBounds
from evoforge.stages.population.item import Item


@dataclass
class StagePool:
    """A stage plug-in with what the engine keeps for it: the items waiting for it, its worker
    tasks (some may be retiring), and what it has done (items finished, busy worker-seconds)."""

    stage: Stage
    bounds: WorkerBounds
    queue: deque[Item] = field(default_factory=deque)
    tasks: set[asyncio.Task] = field(default_factory=set)
    retiring: int = 0
    busy: int = 0  # workers inside a stage run right now
    finished: int = 0
    busy_s: float = 0.0

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def workers(self) -> int:
        """Workers that will take another item (retiring ones excluded)."""
        return len(self.tasks) - self.retiring

    @property
    def waiting(self) -> int:
        return len(self.queue)

    def meter(self) -> tuple[int, float]:
        """(items finished, busy worker-seconds) so far."""
        return self.finished, self.busy_s

    def gauges(self) -> dict[str, float]:
        return {f"{self.name}_workers": self.workers, f"{self.name}_busy": self.busy,
                f"{self.name}_queue": self.waiting, f"{self.name}_finished": self.finished,
                f"{self.name}_busy_s": round(self.busy_s, 3)}
