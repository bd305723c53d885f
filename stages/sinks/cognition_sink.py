"""The cognition write-back sink: the Analyzer's lessons become cognition items.

Only lessons an LLM wrote go to the workspace's cognition base, which every later run of every
task reads. Lessons from the offline analyzer or the LLM simulator stay in the run: they go to
the run's own base (`<run>/cognition/`), labelled by who wrote them, so this run's learn stage
still finds them and no other run ever does. A batch of lessons costs one embedder call and one
write per base; a lesson already stored, or too like a stored one
(`cognition.dedupe_similarity`), is skipped, which also makes a resume's catch-up write nothing
twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from evoforge.cognition.entries import UNCHECKED, CognitionItem
from evoforge.cognition.store import CognitionBase
from evoforge.infra.llm.authorship import LESSONS_BY, LLM, OFFLINE, SIMULATED
from evoforge.infra.nodes import Node
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.sinks.base import Event, EventKind, Sink
from evoforge.stages.verify_data import ClaimsData

_WHO = {LLM: "analyzer insight", OFFLINE: "offline analyzer lesson (no LLM)",
        SIMULATED: "LLM simulator lesson (simulated, not an LLM's)"}


def lesson_items(node: Node, run_id: str, task: str, person: str = "") -> list[CognitionItem]:
    """The node's lessons as cognition items, with their provenance, author, run and person, and
    the verdict of the node's claims (stages/verify.py; unchecked when none was checked)."""
    kind = node.artifacts.get(LESSONS_BY, OFFLINE)
    verdict = ClaimsData.peek(node).verdict() or UNCHECKED
    provenance = f"{_WHO.get(kind, kind)} of node {node.id} in run {run_id}"
    return [CognitionItem.create(_title(lesson), lesson, source=f"run {run_id}", task=task,
                                 provenance=provenance, tags=["lesson", kind], run_id=run_id,
                                 person=person, verdict=verdict)
            for lesson in AnalysisData.peek(node).lessons]


class CognitionWriteBack(Sink):
    """Writes lessons to the workspace base (an LLM's) or the run's own base (anyone else's)."""

    name = "cognition"
    interval_s = 2.0

    def __init__(self, shared: CognitionBase | None, run_base: CognitionBase, run_id: str, task: str,
                 dedupe_similarity: float, person: str = "") -> None:
        self.shared, self.run_base, self.person = shared, run_base, person
        self.run_id, self.task, self.dedupe = run_id, task, dedupe_similarity
        self.written = {"shared": 0, "run": 0}

    def gauges(self) -> dict[str, int]:
        return {"lessons_to_workspace": self.written["shared"], "lessons_to_run": self.written["run"]}

    def record(self, events: Sequence[Event]) -> None:
        nodes = [e.node for e in events
                 if e.kind == EventKind.FINISHED and e.node is not None and AnalysisData.peek(e.node).lessons]
        self._write(nodes)

    def rebuild(self, nodes: Sequence[Node]) -> None:
        """Lessons of finished nodes that a killed session did not write (nothing twice)."""
        self._write([n for n in nodes if n.status.terminal and AnalysisData.peek(n).lessons])

    def _write(self, nodes: Sequence[Node]) -> None:
        shared: list[CognitionItem] = []
        local: list[CognitionItem] = []
        for node in nodes:
            to_shared = node.artifacts.get(LESSONS_BY) == LLM and self.shared is not None
            (shared if to_shared else local).extend(lesson_items(node, self.run_id, self.task, self.person))
        if shared:
            assert self.shared is not None
            self.written["shared"] += len(self.shared.add_novel(shared, self.dedupe))
        if local:
            self.written["run"] += len(self.run_base.add_novel(local, self.dedupe))


def _title(lesson: str) -> str:
    """A short title for a lesson: its first words."""
    words = lesson.split()
    return " ".join(words[:8]) + ("…" if len(words) > 8 else "")
