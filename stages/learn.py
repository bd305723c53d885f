"""Learn (ASI-Evolve): before the researcher designs a candidate, retrieve prior knowledge.

The learn stage is the run's entry stage: a learn worker draws the item (parent, inspirations)
and queries the cognition base with what is known about the parent — the Analyzer's report on
it, else its motivation — and the task. The top `cognition.top_k` items at or above
`cognition.min_similarity` travel with the item (`Item.knowledge`) into the research prompt,
labelled as prior knowledge. Reading the base is this stage's only access to it; lessons are
written back by the commit.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from evoforge.cognition.knowledge import Knowledge, trust_order
from evoforge.cognition.store import CognitionBase
from evoforge.infra.config import RunConfig
from evoforge.infra.node_data import NodeData
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item, ItemUpdate

_MOTIVATION_CHARS, _NEXT_CHARS = 200, 300
_NEXT = re.compile(r"^## What to try next\n(.*?)(?=^## |\Z)", re.S | re.M)


@dataclass
class LearnData(NodeData, owner="learn"):
    """What the learn stage keeps on a node: the cognition items shown in its prompt."""

    cognition_ids: list[str] = field(default_factory=list)


def learn_query(item: Item, task_description: str) -> str:
    r"""What the base is asked, short (an embedding's cost grows with its tokens: ~25 ms of CPU for
    MiniLM's 256, ~6 ms for 60): what the parent tried (its motivation) and, from the Analyzer's
    report on it, what to try next; without a report, the task's first words.

    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.analysis_data import AnalysisData
    >>> parent = Node(id="p", run_id="r", code="", motivation="Bigger corner circles.")
    >>> AnalysisData.of(parent).report = (
    ...     "## What happened\nScore rose.\n## What to try next\nShrink the middle row.\n")
    >>> learn_query(Item(v_i=0, parent=parent), "Pack 26 circles.")
    'Bigger corner circles.\nShrink the middle row.'
    """
    parent = item.parent
    tried = " ".join(parent.motivation.split())[:_MOTIVATION_CHARS]
    found = _NEXT.search(AnalysisData.peek(parent).report)
    then = " ".join(found.group(1).split())[:_NEXT_CHARS] if found else " ".join(
        task_description.split())[:_NEXT_CHARS]
    return f"{tried}\n{then}".strip()


def retrieve(shared: CognitionBase, run_base: CognitionBase | None, query: str, k: int, task: str,
             min_score: float, reads: Sequence[CognitionBase] = ()) -> list[Knowledge]:
    """The k items to show for `query` from the base the run writes, the bases it only reads and
    the run's own (lessons no LLM wrote stay there): accepted ones, never a refuted lesson, the
    most similar first, confirmed lessons before unconfirmed ones (`trust_order`). The query is
    embedded once (per text: the bases keep recent embeddings and, per table version, recent
    results), and not at all while no base has a table."""
    bases = [base for base in (shared, *reads, run_base) if base is not None and base.has_table()]
    if not bases:
        return []
    vector = shared.query_vector(query)
    found: dict[str, Knowledge] = {}
    for base in bases:
        for item, score in base.search_vector(vector, 2 * k, task, min_score):  # room to swap in
            if item.id not in found or found[item.id].score < score:
                found[item.id] = Knowledge.of(item, score)
    return trust_order(list(found.values()), k)


class Learn(Stage):
    """Retrieves prior knowledge for each new item (only when the run has a cognition base)."""

    name = "learn"
    task_run_name = "learn-{label}"
    data = LearnData
    workers_like = "research"

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.cognition.enabled

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        # the candidate's node is made here, so that its id names the item from the first stage on
        node = item.node.copy() if item.node is not None else new_candidate(item, ctx)
        if ctx.cognition is None:
            return StageResult(node)
        cfg = ctx.config.cognition
        query = learn_query(item, ctx.task.description)
        knowledge = await asyncio.to_thread(retrieve, ctx.cognition, ctx.run_cognition, query, cfg.top_k,
                                            ctx.task.name, cfg.min_similarity, ctx.read_cognition)
        LearnData.of(node).cognition_ids = [k.id for k in knowledge]
        return StageResult(node, updates=ItemUpdate(knowledge=knowledge))
