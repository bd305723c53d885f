"""Merge: GEPA's merge of two Pareto-front candidates. Every `gepa.merge_every`-th item, instead
of a reflective proposal, the parent is merged with another front member it shares an ancestor
with: the artifact kind keeps what each changed since their nearest common ancestor (the better
one by val wins where they clash: infra/artifacts/merge3.py for text, the playbook's delta
replay). The merge skips rollout and research and goes to the gate, which must see it beat the
better of the two on a train minibatch before it is validated. A pair is merged once; an item
with no partner, or whose merge is one of the two, goes on to a reflective proposal.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from evoforge.evaluators.task_model import channel_of
from evoforge.infra.config import RunConfig
from evoforge.infra.node_data import NodeData
from evoforge.infra.nodes import PROPOSED, Node
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.rollout import RolloutData
from evoforge.stages.sample.pareto import pareto_front


@dataclass
class MergeData(NodeData, owner="merge"):
    """The two candidates a merge combined, and their common ancestor."""

    ours: str = ""
    theirs: str = ""
    ancestor: str = ""


class Merge(Stage):
    """Makes every `gepa.merge_every`-th item a merge of two front members (routed to the gate)."""

    name = "merge"
    task_run_name = "merge-{label}"
    data = MergeData
    default_workers, max_workers = 4, 16
    workers_like = "research"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen = 0
        self._tried: set[tuple[str, str]] = set()

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.gepa.merge_every > 0

    def skips(self, item: Item, ctx: RunView) -> bool:
        with self._lock:
            self._seen += 1
            return self._seen % ctx.config.gepa.merge_every != 0

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        node = item.node.copy() if item.node is not None else new_candidate(item, ctx)
        chosen = self._pair(item.parent, ctx.pool)
        if chosen is None:
            return StageResult(node)  # no partner: a reflective proposal as usual
        other, ancestor = chosen
        ours, theirs = sorted((item.parent, other), key=lambda n: _rank(n, ctx.pool))
        merged = ctx.task.artifact.merge(ancestor.code, ours.code, theirs.code)
        if merged is None or merged in (ours.code, theirs.code):
            return StageResult(node)
        channel = channel_of(ctx.task)
        pool_ids = channel.module.ids("train") or channel.module.ids("val")
        cases = ctx.rng.sample(pool_ids, min(ctx.config.gepa.minibatch, len(pool_ids)))
        outcomes = [await channel.evaluate(n.code, cases) for n in (ours, theirs)]
        known = [o.score for o in outcomes if o.score is not None]
        batch = RolloutData.of(node)  # what the gate reads: the cases, the better parent's score there
        batch.cases = cases
        batch.task_model_calls = sum(int(o.metrics.get("task_model_calls", 0)) for o in outcomes)
        batch.parent_score = (max(known) if ctx.pool.maximize else min(known)) if known else None
        data = MergeData.of(node)
        data.ours, data.theirs, data.ancestor = ours.id, theirs.id, ancestor.id
        node.code, node.status = merged, PROPOSED
        node.motivation = f"GEPA merge of {ours.id} and {theirs.id} (common ancestor {ancestor.id})"
        node.diff = ctx.task.artifact.diff(item.parent.code, merged)
        return StageResult(node, to="gate")

    def _pair(self, parent: Node, pool: Pool) -> tuple[Node, Node] | None:
        """A front member not yet merged with `parent`, neither descending from the other, and
        their nearest common ancestor; None when there is none."""
        mine = _lineage(parent, pool)
        for other in pareto_front(pool):
            key = tuple(sorted((parent.id, other.id)))
            if other.id == parent.id or key in self._tried:
                continue
            theirs = _lineage(other, pool)
            if other.id in mine or parent.id in theirs:
                continue
            common = next((node for node in theirs.values() if node.id in mine), None)
            if common is not None:
                with self._lock:
                    self._tried.add(key)  # type: ignore[arg-type]
                return other, common
        return None


def _rank(node: Node, pool: Pool) -> tuple[float, str]:
    """Sort key: the better val score first (unscored last), then the node id."""
    value = pool.value(node)
    if value is None:
        return float("inf"), node.id
    return (-value if pool.maximize else value), node.id


def _lineage(node: Node, pool: Pool) -> dict[str, Node]:
    """`node` and its ancestors in the pool, nearest first."""
    chain: dict[str, Node] = {}
    current: Node | None = node
    while current is not None and current.id not in chain:
        chain[current.id] = current
        current = pool.get(current.parent_id)
    return chain
