"""A run's lesson write-back in a process of its own, for tests/test_cognition_shared.py: waits for
a start file, then writes each lesson of a JSON list through the cognition sink, one node at a time,
as a run does."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from evoforge.cognition.embeddings import make_embedder
from evoforge.cognition.store import CognitionBase
from evoforge.infra.config import CognitionConfig
from evoforge.infra.llm.authorship import LESSONS_BY, LLM
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.sinks.base import Event, EventKind
from evoforge.stages.sinks.cognition_sink import CognitionWriteBack


def main(shared: str, run_dir: str, run_id: str, person: str, lessons_file: str, start: str) -> None:
    embedder = make_embedder(CognitionConfig())
    own = CognitionBase(Path(run_dir) / "cognition", embedder)
    sink = CognitionWriteBack(CognitionBase(shared, embedder), own,
                              run_id, "circle_packing", dedupe_similarity=0.9, person=person)
    lessons = json.loads(Path(lessons_file).read_text())
    while not Path(start).exists():
        time.sleep(0.005)
    for i, lesson in enumerate(lessons):
        node = Node(id=f"{run_id}-{i}", run_id=run_id, code="", status=EVALUATED, score_full=1.0,
                    artifacts={LESSONS_BY: LLM}, owned={"analyze": AnalysisData(lessons=[lesson])})
        sink.record([Event(EventKind.FINISHED, node)])
    print(json.dumps(sink.written))


if __name__ == "__main__":
    main(*sys.argv[1:])
