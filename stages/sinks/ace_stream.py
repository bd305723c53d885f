"""The sink that keeps ACE's stream figures, shown in status.json under `sinks.ace-stream`: per lap
over the stream, how many cases the generator answered and the mean score of those answers, made
with the playbook as it was before anything was learned from them. In online mode the first lap's
mean is ACE's online accuracy (`online_score`). Rebuilt from the node database on resume."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

from evoforge.infra.nodes import Node
from evoforge.stages.generate_data import GenerateData, StreamPosition
from evoforge.stages.sinks.base import Event, EventKind, Sink

log = logging.getLogger("evoforge.ace")


class AceStream(Sink):
    """Counts each generator step once (by its step number), from every candidate's trip."""

    name = "ace-stream"
    interval_s = 0.5

    def __init__(self, mode: str, position: StreamPosition) -> None:
        self.mode, self.position = mode, position
        self._steps: dict[int, tuple[int, list[float]]] = {}  # step -> (lap, the parent's scores)
        self._lock = threading.Lock()

    def record(self, events: Sequence[Event]) -> None:
        self.rebuild([e.node for e in events if e.kind == EventKind.FINISHED and e.node is not None])

    def rebuild(self, nodes: Sequence[Node]) -> None:
        with self._lock:
            for node in nodes:
                data = GenerateData.peek(node)
                if data.step >= 0:
                    self.position.seen(data.step)
                if data.step >= 0 and data.scores:
                    self._steps[data.step] = (data.lap, list(data.scores))

    def gauges(self) -> dict[str, Any]:
        with self._lock:
            steps = list(self._steps.values())
        laps: dict[int, list[float]] = {}
        for lap, scores in steps:
            laps.setdefault(lap, []).extend(scores)
        by_lap = {str(lap): {"cases": len(s), "mean_score": round(sum(s) / len(s), 6)}
                  for lap, s in sorted(laps.items())}
        first = by_lap.get("1")
        return {"mode": self.mode, "steps": len(steps), "laps": by_lap,
                "online_score": first["mean_score"] if self.mode == "online" and first else None}

    def close(self) -> None:
        log.info("ace %s stream: %s", self.mode, json.dumps(self.gauges()))
