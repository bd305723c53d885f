"""Descendant credit: how much a node's descendants improved on their parents, decayed by depth.

ASI-Evolve's review notes that experience reuse had a poor signal-to-noise ratio and suggests
crediting a node with whether its descendants kept improving. When a child beats its parent by
`gain` (in selection-score units), the parent gets `gain`, the grandparent `gain * decay`, and so
on up the lineage while the share stays above 1/1000. Samplers may weight parents by it.
"""

from __future__ import annotations

from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool

_MIN_SHARE = 1e-3
_MAX_DEPTH = 32


class DescendantCredit:
    """Credit per node id, kept in step with the pool (every contribution can be undone)."""

    def __init__(self, decay: float):
        self.decay = decay
        self.credit: dict[str, float] = {}
        self._parent: dict[str, str | None] = {}
        self._score: dict[str, float] = {}
        self._given: dict[str, list[tuple[str, float]]] = {}  # node id -> what its arrival added

    def add(self, node: Node, pool: Pool) -> None:
        """Credit the ancestors of a node that just entered the pool."""
        self._parent[node.id] = node.parent_id
        self._score[node.id] = pool.score(node)
        parent = node.parent_id
        if parent not in self._score:
            return
        gain = self._score[node.id] - self._score[parent]
        if gain <= 0:
            return
        given: list[tuple[str, float]] = []
        share, ancestor, depth = gain, parent, 0
        while ancestor is not None and ancestor in self._score and depth < _MAX_DEPTH:
            self.credit[ancestor] = self.credit.get(ancestor, 0.0) + share
            given.append((ancestor, share))
            share *= self.decay
            if share < gain * _MIN_SHARE:
                break
            ancestor, depth = self._parent.get(ancestor), depth + 1
        self._given[node.id] = given

    def remove(self, node: Node) -> None:
        """Undo everything the node's arrival added (a rolled-back speculation)."""
        for ancestor, share in self._given.pop(node.id, []):
            if ancestor not in self._score:  # taken out itself already
                continue
            left = self.credit.get(ancestor, 0.0) - share
            if abs(left) < 1e-12:
                self.credit.pop(ancestor, None)
            else:
                self.credit[ancestor] = left
        self._parent.pop(node.id, None)
        self._score.pop(node.id, None)
        self.credit.pop(node.id, None)

    def rescore(self, node: Node, pool: Pool) -> None:
        """Recompute the node's own contribution after its score changed in place."""
        if node.id in self._score:
            credit = self.credit.get(node.id)
            self.remove(node)
            self.add(node, pool)
            if credit is not None:
                self.credit[node.id] = credit

    def of(self, node: Node) -> float:
        return self.credit.get(node.id, 0.0)

    def normalized(self, node: Node, pool: Pool) -> float:
        """The node's credit in units of the pool's score range, capped at 1."""
        low, high = pool.score_range()
        if high <= low:
            return 0.0
        return min(1.0, self.credit.get(node.id, 0.0) / (high - low))

    def state(self) -> dict[str, float]:
        return {k: round(v, 12) for k, v in sorted(self.credit.items())}
