"""UCB1 parent sampling (ASI-Evolve): each node is a bandit arm, its pull a child designed from it.

Arms never pulled go first, best first; then the bonus sqrt(ln N / n_i) brings the others back:

    >>> import random
    >>> from evoforge.infra.config import SearchConfig
    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.population.pool import Pool
    >>> sampler, pool, rng = UCB1Sampler(SearchConfig(sampler="ucb1", ucb1_c=0.5)), Pool(), random.Random(0)
    >>> for i, score in enumerate([1.0, 3.0, 2.0]):
    ...     node = Node(id=f"n{i}", run_id="demo", code="x = 1", score_full=score)
    ...     _ = pool.add(node)
    ...     sampler.on_node_added(node, pool)
    >>> [sampler.select_parent(pool, rng).id for _ in range(8)]
    ['n1', 'n2', 'n0', 'n1', 'n1', 'n1', 'n1', 'n1']
    >>> sampler.visits(pool.best), sampler.total
    (6, 8)
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler, register

_GROW = 1024


@register("ucb1")
class UCB1Sampler(ParentSampler):
    """Picks the node maximising normalised score + c * sqrt(ln N / n_i) (+ credit_weight * credit).

    n_i counts how often node i was selected as a parent (it grows at selection time, so
    concurrent research workers spread over arms instead of all pulling the same one) and N is
    their sum. A node never selected has n_i = 0 and goes first; among several, the best-scoring.
    Scores are normalised to [0, 1] between the pool's worst and best. Selection is one
    vectorised pass over NumPy arrays: O(N) but about a millisecond at 100k nodes.
    The exploration / exploitation ratios do not apply: `ucb1_c` is the exploration knob.
    """

    def __init__(self, cfg: SearchConfig):
        super().__init__(cfg)
        self.c = cfg.ucb1_c
        self.total = 0  # N: selections of the nodes now in the pool
        self._nodes: list[Node] = []
        self._slot: dict[str, int] = {}
        self._score = np.zeros(_GROW)
        self._n = np.zeros(_GROW)

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        size = len(self._nodes)
        if size == 0:
            return rng.choice(pool.nodes)
        scores, visits = self._score[:size], self._n[:size]
        low, high = float(scores.min()), float(scores.max())
        norm = (scores - low) / (high - low) if high > low else np.ones(size)
        unvisited = visits == 0
        if unvisited.any():
            index = int(np.argmax(np.where(unvisited, norm, -1.0)))
        else:
            value = norm + self.c * np.sqrt(math.log(max(self.total, 1)) / visits)
            if self.cfg.credit_weight > 0:
                value = value + self.cfg.credit_weight * self._credit_column(size, high - low)
            index = int(np.argmax(value))
        node = self._nodes[index]
        self._visit(node.id)
        return node

    def replay_selection(self, child: Node, pool: Pool) -> None:
        if child.parent_id is not None:
            self._visit(child.parent_id)

    def visits(self, node: Node) -> int:
        """How often the node was selected as a parent (0 when it is not in the pool)."""
        slot = self._slot.get(node.id)
        return 0 if slot is None else int(self._n[slot])

    def _visit(self, node_id: str) -> None:
        slot = self._slot.get(node_id)
        if slot is not None:
            self._n[slot] += 1
            self.total += 1

    def _credit_column(self, size: int, span: float) -> np.ndarray:
        credit = np.zeros(size)
        for node_id, value in self.credit.credit.items():
            slot = self._slot.get(node_id)
            if slot is not None:
                credit[slot] = value
        return np.minimum(credit / span, 1.0) if span > 0 else credit

    def _added(self, node: Node, pool: Pool) -> None:
        slot = len(self._nodes)
        if slot == len(self._score):
            self._score = np.concatenate([self._score, np.zeros(len(self._score))])
            self._n = np.concatenate([self._n, np.zeros(len(self._n))])
        self._nodes.append(node)
        self._slot[node.id] = slot
        self._score[slot] = pool.score(node)
        self._n[slot] = 0

    def _removed(self, node: Node, pool: Pool) -> None:
        slot = self._slot.pop(node.id, None)
        if slot is None:
            return
        size = len(self._nodes)
        self.total -= int(self._n[slot])  # its selections no longer count towards N
        del self._nodes[slot]
        self._score[slot:size - 1] = self._score[slot + 1:size]
        self._n[slot:size - 1] = self._n[slot + 1:size]
        for later in self._nodes[slot:]:
            self._slot[later.id] -= 1

    def _rescored(self, node: Node, pool: Pool) -> None:
        slot = self._slot.get(node.id)
        if slot is not None:
            self._score[slot] = pool.score(node)

    def _state(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "arms": [[n.id, float(self._score[i]), int(self._n[i])] for i, n in enumerate(self._nodes)],
        }
