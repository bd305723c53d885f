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

from evoforge.cognition.knowledge import Knowledge
from evoforge.infra.config import RunConfig
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.pipeline.stage import Stage, StageResult, WorkerBounds
from evoforge.stages.population.candidate import new_candidate
from evoforge.stages.population.item import Item

_QUERY_CHARS = 1500


def learn_query(item: Item, task_description: str) -> str:
    """What the base is asked: the parent's analysis (or motivation), then the task."""
    parent = item.parent
    known = parent.analysis.strip() or parent.motivation.strip()
    return f"{known[:_QUERY_CHARS]}\n\n{task_description[:_QUERY_CHARS]}".strip()


class Learn(Stage):
    """Retrieves prior knowledge for each new item (only when the run has a cognition base)."""

    name = "learn"
    then = "research"
    task_run_name = "learn-{label}"

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.cognition.enabled

    def workers(self, cfg: RunConfig) -> WorkerBounds:
        return WorkerBounds.configured(cfg.engine.workers.research, cfg, cfg.adaptive.max_research)

    async def run(self, item: Item, ctx: StageContext) -> StageResult:
        # the candidate's node is made here, so that its id names the item from the first stage on
        node = item.node.copy() if item.node is not None else new_candidate(item, ctx)
        if ctx.cognition is None:
            return StageResult(node)
        cfg = ctx.config.cognition
        query = learn_query(item, ctx.task.description)
        found = await asyncio.to_thread(ctx.cognition.search, query, cfg.top_k, ctx.task.name,
                                        cfg.min_similarity)
        knowledge = [Knowledge(c.id, c.title, c.text, c.provenance, round(float(score), 4))
                     for c, score in found]
        node.cognition_ids = [k.id for k in knowledge]
        return StageResult(node, updates={"knowledge": knowledge})
