"""MAP-Elites parent sampling: a grid of behaviour cells, each holding its best program, drives selection.

Here the one feature is a task metric, so each node's cell is its `loss` bin:

    >>> import random
    >>> from evoforge.infra.config import SearchConfig
    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.population.pool import Pool
    >>> cfg = SearchConfig(sampler="map_elites", map_elites_features=["loss"], map_elites_bins=4,
    ...                    feature_ranges={"loss": (0.0, 1.0)})
    >>> sampler, pool, rng = MapElitesSampler(cfg), Pool(), random.Random(0)
    >>> for i, (score, loss) in enumerate([(1.0, 0.1), (3.0, 0.15), (2.0, 0.9)]):
    ...     node = Node(id=f"n{i}", run_id="demo", code="x = 1", score_full=score, metrics={"loss": loss})
    ...     _ = pool.add(node)
    ...     sampler.on_node_added(node, pool)
    >>> {cell: node.id for cell, node in sampler.elite.items()}
    {(0,): 'n1', (3,): 'n2'}
    >>> [sampler.select_parent(pool, rng).id for _ in range(8)]
    ['n1', 'n2', 'n1', 'n1', 'n1', 'n1', 'n1', 'n1']
"""

from __future__ import annotations

import bisect
import random
from typing import Any

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler, register
from evoforge.stages.sample.features import FeatureSpace

Cell = tuple[int, ...]


@register("map_elites")
class MapElitesSampler(ParentSampler):
    """Every parent is the elite of some cell: with p=exploitation the best of a tournament of
    `elite_size` random cells, with p=exploration the elite of a uniform random cell, else the
    elite of the best node's cell. A cell's elite is replaced only by a strictly better node.

    Features are `map_elites_features` (default: complexity and diversity of the EVOLVE block
    against the first node, see features.py), each cut into `map_elites_bins` bins. Selection
    costs O(elite_size); adding a node costs one feature measurement.
    """

    def __init__(self, cfg: SearchConfig):
        super().__init__(cfg)
        self.space = FeatureSpace(cfg.map_elites_features, cfg.map_elites_bins, cfg.feature_ranges)
        self._reset()

    def _reset(self) -> None:
        self.reference: str | None = None
        self.elite: dict[Cell, Node] = {}
        self.cells: list[Cell] = []  # occupied cells, sorted, so that draws do not depend on history
        self._members: dict[Cell, list[Node]] = {}  # every node that landed in a cell, in arrival order
        self._cell_of: dict[str, Cell] = {}
        self._arrivals: dict[str, int] = {}
        self._next = 0

    def cell_of(self, node: Node) -> Cell | None:
        return self._cell_of.get(node.id)

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        if not self.cells:
            return rng.choice(pool.nodes)
        draw = rng.random()
        if draw < self.cfg.exploitation:
            picked = rng.sample(self.cells, min(self.cfg.elite_size, len(self.cells)))
            return max((self.elite[c] for c in picked), key=lambda n: self._merit(n, pool))
        if draw < self.cfg.exploitation + self.cfg.exploration:
            return self.elite[rng.choice(self.cells)]
        best_cell = self._cell_of.get(pool.best.id) if pool.best is not None else None
        if best_cell is not None:
            return self.elite[best_cell]
        return max(self.elite.values(), key=pool.score)

    def diverse_nodes(self, parent: Node, pool: Pool, rng: random.Random, k: int) -> list[Node]:
        """Elites of the cells nearest the parent's (other cells first, then farther ones)."""
        home = self._cell_of.get(parent.id)
        if home is None:
            return super().diverse_nodes(parent, pool, rng, k)
        by_distance = sorted(
            (c for c in self.cells if self.elite[c].id != parent.id),
            key=lambda c: (max(abs(a - b) for a, b in zip(c, home, strict=True)) or len(home) + 1,
                           rng.random()),
        )
        return [self.elite[c] for c in by_distance[:k]]

    def _merit(self, node: Node, pool: Pool) -> float:
        merit = pool.score(node)
        if self.cfg.credit_weight > 0:
            low, high = pool.score_range()
            merit += self.cfg.credit_weight * self.credit.normalized(node, pool) * (high - low)
        return merit

    def _added(self, node: Node, pool: Pool) -> None:
        if not self.space.has_reference:
            self.space.set_reference(node)
            self.reference = node.id
        cell = self.space.cell(node)
        self._cell_of[node.id] = cell
        self._arrivals[node.id] = self._next
        self._next += 1
        self._members.setdefault(cell, []).append(node)
        incumbent = self.elite.get(cell)
        if incumbent is None:
            self.elite[cell] = node
            bisect.insort(self.cells, cell)
        elif pool.score(node) > pool.score(incumbent):
            self.elite[cell] = node

    def _removed(self, node: Node, pool: Pool) -> None:
        if node.id == self.reference:  # every cell was measured against it: measure again
            rest = sorted((n for ms in self._members.values() for n in ms if n.id != node.id),
                          key=lambda n: self._arrivals[n.id])
            self.space = FeatureSpace(self.cfg.map_elites_features, self.cfg.map_elites_bins,
                                      self.cfg.feature_ranges)
            self._reset()
            for other in rest:
                self._added(other, pool)
            return
        cell = self._cell_of.pop(node.id, None)
        if cell is None:
            return
        self._arrivals.pop(node.id)
        members = [n for n in self._members[cell] if n.id != node.id]
        if not members:
            del self._members[cell], self.elite[cell]
            self.cells.remove(cell)
            return
        self._members[cell] = members
        if self.elite[cell].id == node.id:
            elite = members[0]
            for other in members[1:]:
                if pool.score(other) > pool.score(elite):
                    elite = other
            self.elite[cell] = elite

    def _rescored(self, node: Node, pool: Pool) -> None:
        if node.id in self._cell_of:
            self._removed(node, pool)
            self._added(node, pool)

    def _state(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "elites": {",".join(map(str, c)): self.elite[c].id for c in self.cells},
            "members": {",".join(map(str, c)): [n.id for n in ms] for c, ms in sorted(self._members.items())},
        }
