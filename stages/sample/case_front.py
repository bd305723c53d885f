"""The per-case Pareto front of a set of nodes, kept up to date as nodes enter, leave or change.

For every validation case the front remembers the best (signed) score and the nodes holding it,
and for every node the number of cases it holds: a node's arrival touches only its own cases, a
departure rescans a case only when it took the case's last holder with it. The front itself (the
holders no other holder dominates) is recomputed from the holders, and only after a change among
them: a node best on no case leaves it as it was.

    >>> from evoforge.infra.nodes import Node
    >>> front = CaseFront()
    >>> for name, scores in {"a": [1, 1, 0], "b": [1, 0, 1], "c": [0.5, 0.5, 0.5]}.items():
    ...     front.add(Node(id=name, run_id="demo", code=name,
    ...                    case_scores={f"v{i}": float(s) for i, s in enumerate(scores)}))
    >>> nodes, wins = front.members()
    >>> [n.id for n in nodes], wins
    (['a', 'b'], [2, 2])
"""

from __future__ import annotations

from collections.abc import Mapping

from evoforge.infra.nodes import Node


def dominates(a: Mapping[str, float], b: Mapping[str, float], maximize: bool) -> bool:
    """True when scores `a` are at least as good as `b` on every shared case and better on one."""
    shared = a.keys() & b.keys()
    if not shared:
        return False
    sign = 1.0 if maximize else -1.0
    diffs = [sign * (a[c] - b[c]) for c in shared]
    return all(d >= 0 for d in diffs) and any(d > 0 for d in diffs)


class CaseFront:
    """Best score and holders per case, wins per node, and the front derived from them."""

    def __init__(self, maximize: bool = True) -> None:
        self.maximize = maximize
        self._nodes: dict[str, Node] = {}  # every node followed, case-scored or not
        self._order: dict[str, int] = {}  # arrival number: the front keeps the pool's order
        self._arrivals = 0
        self._cases: dict[str, dict[str, float]] = {}  # node id -> its signed case scores
        self._best: dict[str, float] = {}
        self._holders: dict[str, set[str]] = {}
        self._wins: dict[str, int] = {}  # node id -> cases it holds (absent: none)
        self._members: tuple[list[Node], list[int]] | None = None

    @property
    def size(self) -> int:
        """Nodes followed (with or without case scores)."""
        return len(self._nodes)

    def add(self, node: Node) -> None:
        """A node entered (one already followed is rescored instead)."""
        if node.id in self._nodes:
            self.rescore(node)
            return
        self._nodes[node.id] = node
        self._order[node.id] = self._arrivals
        self._arrivals += 1
        self._set(node.id, self._signed(node))

    def remove(self, node: Node) -> None:
        """A node left (unknown ones are ignored)."""
        if self._nodes.pop(node.id, None) is None:
            return
        del self._order[node.id]
        self._set(node.id, {})

    def rescore(self, node: Node) -> None:
        """A node's case scores changed in place; it keeps its place in the order."""
        if node.id not in self._nodes:
            self.add(node)
            return
        self._nodes[node.id] = node
        self._set(node.id, self._signed(node))

    def members(self) -> tuple[list[Node], list[int]]:
        """The front in arrival order, and the number of cases each member is best on."""
        if self._members is None:
            held = sorted(self._wins, key=self._order.__getitem__)
            front = [i for i in held if not any(
                dominates(self._cases[o], self._cases[i], True) for o in held if o != i)]
            self._members = [self._nodes[i] for i in front], [self._wins[i] for i in front]
        return self._members

    def _signed(self, node: Node) -> dict[str, float]:
        if self.maximize:
            return dict(node.case_scores)
        return {c: -v for c, v in node.case_scores.items()}

    def _set(self, node_id: str, scores: dict[str, float]) -> None:
        old = self._cases.pop(node_id, {})
        if scores:
            self._cases[node_id] = scores
        held = node_id in self._wins
        for case in old.keys() | scores.keys():
            self._refresh(case, node_id, scores.get(case))
        if held or node_id in self._wins:  # a holder's scores decide who it dominates
            self._members = None

    def _refresh(self, case: str, node_id: str, value: float | None) -> None:
        """Bring `case`'s best and holders up to date after `node_id`'s score on it became `value`."""
        holders = self._holders.setdefault(case, set())
        best = self._best.get(case)
        held = node_id in holders
        if value is not None and (best is None or value > best):
            for other in holders - {node_id}:
                self._count(other, -1)
            self._best[case], self._holders[case] = value, {node_id}
            if not held:
                self._count(node_id, 1)
        elif value is not None and value == best:
            if not held:
                holders.add(node_id)
                self._count(node_id, 1)
        elif held:
            holders.discard(node_id)
            self._count(node_id, -1)
            if not holders:
                self._rescan(case)

    def _rescan(self, case: str) -> None:
        """The case lost its last holder: find its best among the nodes still scored on it."""
        values = [(scores[case], i) for i, scores in self._cases.items() if case in scores]
        if not values:
            del self._best[case], self._holders[case]
            return
        best = max(v for v, _ in values)
        self._best[case], self._holders[case] = best, {i for v, i in values if v == best}
        for node_id in self._holders[case]:
            self._count(node_id, 1)

    def _count(self, node_id: str, delta: int) -> None:
        self._members = None  # who holds which case changed: the front is computed again
        wins = self._wins.get(node_id, 0) + delta
        if wins:
            self._wins[node_id] = wins
        else:
            self._wins.pop(node_id, None)
