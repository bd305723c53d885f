"""GEPA's parent choice: the per-case Pareto front of the pool's scores on the validation cases.

A node is on the front when no other node does at least as well on every case it was scored on
and better on one; among the front, a parent is drawn with a weight of the number of cases it is
best on (ties count for each). So a candidate that alone solves a hard case stays a parent even
when its mean is lower, and selection does not chase the mean of the validation set (GEPA #133).
Nodes without per-case scores (a task that is not case-based, a speculative prefix) are ranked by
their score alone, as greedy would.

The sampler keeps the front up to date from the pool's add / remove / rescore hooks
(stages/sample/case_front.py), so a selection costs the size of the front, not of the pool;
`pareto_front` and `case_wins` compute the same from scratch (the shared merge stage reads them).

    >>> import random
    >>> from evoforge.infra.config import SearchConfig
    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.population.pool import Pool
    >>> pool, sampler = Pool(), ParetoSampler(SearchConfig(sampler="pareto"))
    >>> for name, scores in {"a": [1, 1, 0], "b": [1, 0, 1], "c": [0.5, 0.5, 0.5], "d": [1, 0, 0]}.items():
    ...     node = Node(id=name, run_id="demo", code=name, score_full=sum(scores) / 3,
    ...                 case_scores={f"v{i}": float(s) for i, s in enumerate(scores)})
    ...     _ = pool.add(node)
    ...     sampler.on_node_added(node, pool)
    >>> sorted(n.id for n in pareto_front(pool))
    ['a', 'b']
    >>> sorted({sampler.select_parent(pool, random.Random(i)).id for i in range(20)})
    ['a', 'b']
"""

from __future__ import annotations

import random

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler, register
from evoforge.stages.sample.case_front import CaseFront, dominates


def case_wins(pool: Pool) -> dict[str, int]:
    """For each node scored case by case, the number of cases it is (jointly) best on."""
    best: dict[str, float] = {}
    scored = [n for n in pool.nodes if n.case_scores]
    for node in scored:
        for case, value in node.case_scores.items():
            signed = value if pool.maximize else -value
            best[case] = max(best.get(case, signed), signed)
    return {n.id: sum((v if pool.maximize else -v) >= best[c] for c, v in n.case_scores.items())
            for n in scored}


def pareto_front(pool: Pool) -> list[Node]:
    """The nodes no other node dominates on the cases they share (best on at least one case),
    computed from scratch, in pool order."""
    wins = case_wins(pool)
    candidates = [n for n in pool.nodes if wins.get(n.id, 0) > 0]
    return [n for n in candidates
            if not any(dominates(other.case_scores, n.case_scores, pool.maximize)
                       for other in candidates if other is not n)]


@register("pareto")
class ParetoSampler(ParentSampler):
    """Draws the parent from the per-case Pareto front, weighted by the cases each member wins."""

    def __init__(self, cfg: SearchConfig) -> None:
        super().__init__(cfg)
        self.front = CaseFront()
        self._pool: Pool | None = None  # the pool the hooks followed (another one: rebuilt)

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        self._follow(pool)
        front, weights = self.front.members()
        if not front:  # nothing scored case by case yet
            return pool.best if pool.best is not None else rng.choice(pool.nodes)
        return rng.choices(front, weights=weights, k=1)[0]

    def _follow(self, pool: Pool) -> None:
        """Rebuild the front from the pool when the hooks did not follow this pool (a pool filled
        without them, as a test or a doctest may do)."""
        if self._pool is not pool or self.front.size != len(pool.nodes):
            self.front = CaseFront(pool.maximize)
            for node in pool.nodes:
                self.front.add(node)
            self._pool = pool

    def _added(self, node: Node, pool: Pool) -> None:
        self._adopt(pool)
        self.front.add(node)

    def _removed(self, node: Node, pool: Pool) -> None:
        self._adopt(pool)
        self.front.remove(node)

    def _rescored(self, node: Node, pool: Pool) -> None:
        self._adopt(pool)
        self.front.rescore(node)

    def _adopt(self, pool: Pool) -> None:
        if self._pool is not pool:
            self._pool, self.front = pool, CaseFront(pool.maximize)
