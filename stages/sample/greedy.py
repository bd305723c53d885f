"""Greedy parent sampling with exploration: mostly the best, sometimes the elite, sometimes anyone."""

from __future__ import annotations

import random

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.pool import Pool
from evoforge.stages.sample.base import register


@register("greedy")
class GreedySampler:
    """With p=exploitation the best node, p=exploration a uniform node, else one of the top elite."""

    def __init__(self, cfg: SearchConfig):
        self.cfg = cfg

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        draw = rng.random()
        if draw < self.cfg.exploitation and pool.best is not None:
            return pool.best
        if draw < self.cfg.exploitation + self.cfg.exploration:
            return rng.choice(pool.nodes)
        return rng.choice(pool.ranked()[: self.cfg.elite_size])

    def on_node_added(self, node: Node, pool: Pool) -> None:
        return None
