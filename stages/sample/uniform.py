"""Uniform parent sampling: every evaluated node equally likely."""

from __future__ import annotations

import random

from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import SamplerBase, register


@register("uniform")
class UniformSampler(SamplerBase):
    """Picks any evaluated node with equal probability (the ablation's random baseline)."""

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        return rng.choice(pool.nodes)
