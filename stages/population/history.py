"""The pool's update history: what changed at each version, for staleness checks and reflection."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.infra.nodes import Node

NEW_BEST = "new_best"
SPECULATIVE_BEST = "speculative_best"
ROLLBACK = "rollback"


@dataclass(frozen=True)
class PoolUpdate:
    """One version bump: the pool went from v-1 to v because of `node`."""

    v: int
    kind: str
    node: Node


@dataclass
class PoolHistory:
    """Updates by version; rebuilt from the node database on resume (new bests in order)."""

    updates: list[PoolUpdate] = field(default_factory=list)

    def record(self, v: int, kind: str, node: Node) -> None:
        self.updates.append(PoolUpdate(v, kind, node))

    def since(self, v_i: int) -> list[PoolUpdate]:
        """Updates after version `v_i`, oldest first."""
        return [u for u in self.updates if u.v > v_i]
