"""Each plan branch gets its share of research: the next item goes to the branch furthest behind,
and its parent comes from that branch (a branch with no evaluated node yet starts from the pool's
best). Counts are per branch id, so a branch that keeps its slot keeps its history."""

from __future__ import annotations

import random
from collections import Counter

from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.rounds.branches import Branch, Plan
from evoforge.stages.rounds.plan_data import node_branch


class BranchShares:
    """How many items each branch has been given; picks the next branch and its parent."""

    def __init__(self, issued: Counter[str] | None = None) -> None:
        self.issued: Counter[str] = issued if issued is not None else Counter()

    def pick(self, plan: Plan) -> Branch:
        """The slot whose branch has had the fewest items (ties: the lower slot)."""
        return min(plan.slots, key=lambda b: (self.issued[b.id], b.slot))

    def note(self, branch_id: str) -> None:
        self.issued[branch_id] += 1

    @classmethod
    def rebuild(cls, nodes: list[Node]) -> BranchShares:
        """The counts as the node database has them (resume)."""
        branches = (node_branch(n) for n in nodes if n.origin != "seed")
        return cls(Counter(b for b in branches if b is not None))


def branch_parent(branch: Branch, pool: Pool, rng: random.Random, exploitation: float) -> Node | None:
    """A parent for the branch: its best node with probability `exploitation`, else one of its
    nodes at random; None when the branch has no evaluated node yet."""
    members = [n for n in pool.ranked() if node_branch(n) == branch.id]
    if not members:
        return None
    return members[0] if rng.random() < exploitation else rng.choice(members)
