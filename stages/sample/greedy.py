"""Greedy parent sampling with exploration: mostly the best, sometimes the elite, sometimes anyone."""

from __future__ import annotations

import random

from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import SamplerBase, register


@register("greedy")
class GreedySampler(SamplerBase):
    """With p=exploitation the best node, p=exploration a uniform node, else one of the top elite.

    The elite choice is weighted by descendant credit when `credit_weight` > 0. Selection reads the
    pool's incremental ranking, so it costs O(elite_size) whatever the pool size.

        >>> from evoforge.infra.config import SearchConfig
        >>> GreedySampler(SearchConfig()).cfg.exploitation
        0.6
    """

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        draw = rng.random()
        if draw < self.cfg.exploitation and pool.best is not None:
            return pool.best
        if draw < self.cfg.exploitation + self.cfg.exploration:
            return rng.choice(pool.nodes)
        return self._weighted_elite(pool.top(self.cfg.elite_size), pool, rng)
