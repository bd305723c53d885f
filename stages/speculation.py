"""Speculative stage completion: judge a candidate on a prefix of its validation cases.

After `alpha_spec` of the cases, the prefix score is compared with the pool's best on the same
cases. A prefix that beats it is released into the pool at once, as a speculative node that the
rest of the evaluation confirms or rolls back. A prefix that cannot beat it stops the evaluation
there (pruned), which is where the time is saved.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from evoforge.evaluators.cases import CaseResult
from evoforge.infra.nodes import Node
from evoforge.stages.case_order import partial_score
from evoforge.stages.item import Item
from evoforge.stages.pool import Pool


def prefix_reference(best: Node | None, cases: list[str]) -> float | None:
    """The best node's mean score over `cases` (its overall score when it lacks some of them)."""
    if best is None:
        return None
    scores = [best.case_scores[c] for c in cases if c in best.case_scores]
    if len(scores) == len(cases) and scores:
        return sum(scores) / len(scores)
    return best.score_full


def beats(a: float, b: float | None, maximize: bool) -> bool:
    return b is None or (a > b if maximize else a < b)


@dataclass
class Speculation:
    """The per-candidate state machine fed by each finished case: prune, release, or go on."""

    node: Node
    pool: Pool
    alpha: float
    total: int
    prune: bool
    release: Callable[[], None]
    scores: dict[str, float] = field(default_factory=dict)
    decided: bool = False
    released: bool = False
    pruned: bool = False

    @property
    def prefix_len(self) -> int:
        return max(1, math.ceil(self.alpha * self.total))

    def on_case(self, result: CaseResult) -> bool:
        """Record one case; returns False to stop the evaluation (pruned)."""
        if result.score is None:
            return True
        self.scores[result.case] = result.score
        if self.decided or len(self.scores) < self.prefix_len:
            return True
        self.decided = True
        partial = partial_score(self.scores)
        assert partial is not None
        self.node.score_partial = partial
        reference = prefix_reference(self.pool.best, list(self.scores))
        if beats(partial, reference, self.pool.maximize):
            self.released = True
            self.node.speculative_at = time.time()
            self.release()
            return True
        if self.prune:
            self.pruned = True
            return False
        return True


def confirmed(node: Node, pool: Pool) -> bool:
    """True when a released node's full score beats every other node in the pool."""
    assert node.score_full is not None
    full = node.score_full if pool.maximize else -node.score_full
    other = next((n for n in pool.top(2) if n.id != node.id), None)
    return other is None or full > pool.score(other)


def taint_derived(items: Iterable[Item], rolled_back: str) -> list[Item]:
    """Mark every item whose parent is the rolled-back node as stale; returns them."""
    marked = []
    for item in items:
        if item.parent.id == rolled_back and (item.node is None or item.node.id != rolled_back):
            item.tainted_by = rolled_back
            marked.append(item)
    return marked
