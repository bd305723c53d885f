"""Greedy parent sampling with exploration: mostly the best, sometimes the elite, sometimes anyone.

    >>> import random
    >>> from evoforge.infra.config import SearchConfig
    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.population.pool import Pool
    >>> sampler, pool, rng = GreedySampler(SearchConfig(exploitation=0.6)), Pool(), random.Random(0)
    >>> for i, score in enumerate([1.0, 3.0, 2.0]):
    ...     node = Node(id=f"n{i}", run_id="demo", code="x = 1", score_full=score)
    ...     _ = pool.add(node)
    ...     sampler.on_node_added(node, pool)
    >>> [sampler.select_parent(pool, rng).id for _ in range(8)]
    ['n2', 'n1', 'n2', 'n1', 'n1', 'n2', 'n1', 'n0']
"""

from __future__ import annotations

import random

from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler, register


@register("greedy")
class GreedySampler(ParentSampler):
    """With p=exploitation the best node, p=exploration a uniform node, else one of the top elite.

    The elite choice is weighted by descendant credit when `credit_weight` > 0. Selection reads the
    pool's incremental ranking, so it costs O(elite_size) whatever the pool size.
    """

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        draw = rng.random()
        if draw < self.cfg.exploitation and pool.best is not None:
            return pool.best
        if draw < self.cfg.exploitation + self.cfg.exploration:
            return rng.choice(pool.nodes)
        return self._weighted_elite(pool.top(self.cfg.elite_size), pool, rng)
