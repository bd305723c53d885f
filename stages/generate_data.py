"""What the generator (ACE's first role, stages/generate.py) keeps: the stream step a candidate
learned from, on the node, and the stream's next step, shared by the stage and its sink."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from evoforge.infra.node_data import NodeData


@dataclass
class GenerateData(NodeData, owner="generate"):
    """The step of the stream a candidate learned from, and the parent's answers there."""

    mode: str = ""
    step: int = -1
    lap: int = 0
    cases: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)  # the parent's, before the update (online accuracy)
    task_model_calls: int = 0


class StreamPosition:
    """The next step of the stream, shared by the generator and its sink: the sink's catch-up on
    resume sees every node of the run (a proposal waiting for the engineer included), the pool
    only the evaluated ones; a resumed run goes on after the highest step either has seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen = -1
        self._next: int | None = None

    def seen(self, step: int) -> None:
        with self._lock:
            self._seen = max(self._seen, step)

    def take(self, pool_steps: Iterable[int]) -> int:
        with self._lock:
            if self._next is None:
                self._next = 1 + max(self._seen, max(pool_steps, default=-1))
            step, self._next = self._next, self._next + 1
            return step
