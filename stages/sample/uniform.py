"""Uniform parent sampling: every evaluated node equally likely."""

from __future__ import annotations

import random

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.pool import Pool
from evoforge.stages.sample.base import register


@register("uniform")
class UniformSampler:
    """Picks any evaluated node with equal probability."""

    def __init__(self, cfg: SearchConfig):
        self.cfg = cfg

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        return rng.choice(pool.nodes)

    def on_node_added(self, node: Node, pool: Pool) -> None:
        return None
