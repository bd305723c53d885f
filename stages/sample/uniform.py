"""Uniform parent sampling: every evaluated node equally likely.

    >>> import random
    >>> from evoforge.infra.config import SearchConfig
    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.population.pool import Pool
    >>> sampler, pool, rng = UniformSampler(SearchConfig(sampler="uniform")), Pool(), random.Random(0)
    >>> for i, score in enumerate([1.0, 3.0, 2.0]):
    ...     node = Node(id=f"n{i}", run_id="demo", code="x = 1", score_full=score)
    ...     _ = pool.add(node)
    ...     sampler.on_node_added(node, pool)
    >>> [sampler.select_parent(pool, rng).id for _ in range(8)]
    ['n1', 'n1', 'n0', 'n1', 'n2', 'n1', 'n1', 'n1']
"""

from __future__ import annotations

import random

from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler, register


@register("uniform")
class UniformSampler(ParentSampler):
    """Picks any evaluated node with equal probability (the ablation's random baseline)."""

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        return rng.choice(pool.nodes)
