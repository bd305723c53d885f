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
from dataclasses import dataclass, field

from evoforge.cognition.entries import CognitionItem
from evoforge.cognition.knowledge import Knowledge
from evoforge.cognition.store import CognitionBase
from evoforge.infra.config import RunConfig
from evoforge.infra.node_data import NodeData
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.candidate import new_candidate
from evoforge.stages.population.item import Item, ItemUpdate

_QUERY_CHARS = 1500


@dataclass
class LearnData(NodeData, owner="learn"):
    """What the learn stage keeps on a node: the cognition items shown in its prompt."""

    cognition_ids: list[str] = field(default_factory=list)


def learn_query(item: Item, task_description: str) -> str:
    """What the base is asked: the parent's analysis (or motivation), then the task."""
    parent = item.parent
    known = parent.analysis.strip() or parent.motivation.strip()
    return f"{known[:_QUERY_CHARS]}\n\n{task_description[:_QUERY_CHARS]}".strip()


def retrieve(shared: CognitionBase, run_base: CognitionBase | None, query: str, k: int, task: str,
             min_score: float) -> list[tuple[CognitionItem, float]]:
    """The k items nearest to `query` in the workspace's base and the run's own (lessons no LLM
    wrote stay there), best first; the query is embedded once."""
    vector = shared.query_vector(query)
    found = shared.search_vector(vector, k, task, min_score)
    if run_base is not None:
        found += run_base.search_vector(vector, k, task, min_score)
    return sorted(found, key=lambda hit: -hit[1])[:k]


class Learn(Stage):
    """Retrieves prior knowledge for each new item (only when the run has a cognition base)."""

    name = "learn"
    task_run_name = "learn-{label}"
    data = LearnData
    workers_like = "research"

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.cognition.enabled

    async def run(self, item: Item, ctx: StageContext) -> StageResult:
        # the candidate's node is made here, so that its id names the item from the first stage on
        node = item.node.copy() if item.node is not None else new_candidate(item, ctx)
        if ctx.cognition is None:
            return StageResult(node)
        cfg = ctx.config.cognition
        query = learn_query(item, ctx.task.description)
        found = await asyncio.to_thread(retrieve, ctx.cognition, ctx.run_cognition, query, cfg.top_k,
                                        ctx.task.name, cfg.min_similarity)
        knowledge = [Knowledge(c.id, c.title, c.text, c.provenance, round(float(score), 4))
                     for c, score in found]
        LearnData.of(node).cognition_ids = [k.id for k in knowledge]
        return StageResult(node, updates=ItemUpdate(knowledge=knowledge))
