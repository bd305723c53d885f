"""The sink that remembers proposals a gate rejected (stages/population/rejections.py), from the
head's events as they are recorded and from the node database on resume."""

from __future__ import annotations

from collections.abc import Sequence

from evoforge.infra.nodes import REJECTED, Node
from evoforge.stages.population.rejections import Rejections
from evoforge.stages.sinks.base import Event, EventKind, Sink


class RejectionMemory(Sink):
    """Adds each node the stage `stage` rejected to `memory`, under its parent."""

    name = "rejections"
    interval_s = 0.2

    def __init__(self, memory: Rejections, stage: str) -> None:
        self.memory, self.stage = memory, stage

    def record(self, events: Sequence[Event]) -> None:
        self.rebuild([e.node for e in events if e.kind == EventKind.FINISHED and e.node is not None])

    def rebuild(self, nodes: Sequence[Node]) -> None:
        for node in nodes:
            if node.status == REJECTED and node.failed_stage == self.stage and node.parent_id:
                self.memory.add(node.parent_id, node.motivation or node.diff)
