"""The newest member of the pool: ACE's sequential adaptation, each step building on the playbook
the last step made (whatever its score), not on the best one.

    >>> import random
    >>> from evoforge.infra.config import SearchConfig
    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.population.pool import Pool
    >>> sampler, pool = LatestSampler(SearchConfig()), Pool()
    >>> for i, score in enumerate([1.0, 3.0, 2.0]):
    ...     _ = pool.add(Node(id=f"n{i}", run_id="demo", code=f"x = {i}", score_full=score))
    >>> sampler.select_parent(pool, random.Random(0)).id
    'n2'
"""

from __future__ import annotations

import random

from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler, register


@register("latest")
class LatestSampler(ParentSampler):
    """The node that entered the pool last (a resumed run: the last one the database holds)."""

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        return pool.nodes[-1]
