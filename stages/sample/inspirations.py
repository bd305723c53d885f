"""Inspirations for the research prompt: the best programs, diverse ones, and recent improvements."""

from __future__ import annotations

import random
from collections.abc import Iterator

from evoforge.infra.nodes import Node
from evoforge.stages.population.item import Inspiration
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler

BEST, DIVERSE, RECENT = "best", "diverse", "recent"
LABELS = (BEST, DIVERSE, RECENT)
_RECENT_SCAN = 64  # how far back to look for improvements


def recent_improvements(pool: Pool, k: int) -> list[Node]:
    """Up to k of the latest pool arrivals that beat their parent, newest first."""
    out: list[Node] = []
    for node in reversed(pool.nodes[-_RECENT_SCAN:]):
        parent = pool.get(node.parent_id)
        if parent is not None and pool.better(node, parent):
            out.append(node)
            if len(out) >= k:
                break
    return out


def pick_inspirations(pool: Pool, sampler: ParentSampler, parent: Node, rng: random.Random,
                      want: int) -> list[Inspiration]:
    """Up to `want` inspirations, never the parent, labels taken in turn: best, diverse, recent.

    'diverse' comes from the sampler (nearby MAP-Elites cells, other islands; random pool nodes
    for a policy without a notion of diversity). Costs O(want), whatever the pool size.
    """
    if want <= 0 or not pool.nodes:
        return []
    sources: dict[str, Iterator[Node]] = {
        BEST: iter(pool.top(want + 1)),
        DIVERSE: iter(sampler.diverse_nodes(parent, pool, rng, want)),
        RECENT: iter(recent_improvements(pool, want + 1)),
    }
    taken = {parent.id}
    chosen: list[Inspiration] = []
    while len(chosen) < want and sources:
        for label in list(sources):
            node = next((n for n in sources[label] if n.id not in taken), None)
            if node is None:
                del sources[label]
                continue
            taken.add(node.id)
            chosen.append(Inspiration(node, label))
            if len(chosen) >= want:
                break
    return chosen
