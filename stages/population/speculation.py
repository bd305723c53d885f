"""Speculative stage completion: judge a candidate on a prefix of its validation cases.

After `alpha_spec` of the cases, the prefix score is compared with the reference — the pool's
best *fully evaluated* node, on the same cases — read from the pool when the decision is made
(a node confirmed while the candidate runs raises the bar at once; where the pool is out of
reach, e.g. on a Dask worker, the snapshot taken at dispatch stands). A prefix that beats it is
released into the pool at once, as a speculative node that the rest of the evaluation confirms
or rolls back. A prefix that cannot beat it stops the evaluation there (pruned), which is where
the time is saved. The same test is made again at every further multiple of the prefix length
(10, 20, 30 of 40 cases at alpha 0.25): a released candidate that no longer beats the reference
on the cases done is stopped there too, and so rolled back early instead of after its last
case. With no reference (no fully evaluated node, or one without scores on those cases and no
overall score) nothing is decided: the evaluation runs on. Scores are means taken with
`math.fsum`, so the same case scores give the same mean in any order (a program that ties the
best is never "better" by a rounding error). The state machine reads nothing but its inputs and
the pool it is handed (read only, on the flow's event loop or an evaluation thread), so it may
run on any thread or machine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from evoforge.evaluators.cases import CaseResult
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.population.case_order import partial_score
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool


@dataclass(frozen=True)
class Reference:
    """What a prefix must beat: a fully evaluated node's case scores and overall score.

    `pool`, when set, is the live pool `now()` reads again; a copy sent to another process
    (pickled) leaves it behind and stays the snapshot.
    """

    node_id: str
    score: float
    case_scores: Mapping[str, float]
    maximize: bool
    pool: Pool | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, pool: Pool) -> Reference | None:
        """The pool's best fully evaluated node as a reference (speculative nodes never are)."""
        node = pool.best_confirmed()
        if node is None or node.score_full is None:
            return None
        return cls(node.id, node.score_full, dict(node.case_scores), pool.maximize, pool)

    def now(self) -> Reference:
        """The pool's best fully evaluated node now (this one while it still is, or off the pool)."""
        if self.pool is None:
            return self
        node = self.pool.best_confirmed()
        if node is None or node.id == self.node_id:
            return self
        return Reference.of(self.pool) or self

    def __reduce__(self) -> tuple:
        return Reference, (self.node_id, self.score, dict(self.case_scores), self.maximize)

    def on(self, cases: Iterable[str]) -> float:
        """The reference's mean over `cases`, or its overall score when it lacks some of them."""
        cases = list(cases)
        scores = [self.case_scores[c] for c in cases if c in self.case_scores]
        if scores and len(scores) == len(cases):
            return math.fsum(scores) / len(scores)
        return self.score

    def beaten_by(self, value: float, cases: Iterable[str]) -> bool:
        ref = self.on(cases)
        return value > ref if self.maximize else value < ref


@dataclass
class Speculation:
    """The per-candidate state machine fed by each finished case: prune, release, or go on.

    `release(score_partial, prefix_case_scores)` is called once, from wherever the evaluation
    runs, when the prefix beats the reference.
    """

    alpha: float
    total: int
    prune: bool
    reference: Reference | None
    release: Callable[[float, dict[str, float]], None] | None = None
    scores: dict[str, float] = field(default_factory=dict)
    partial: float | None = None
    decided: bool = False
    released_at: float | None = None
    pruned: bool = False

    @property
    def prefix_len(self) -> int:
        return max(1, math.ceil(self.alpha * self.total))

    def on_case(self, result: CaseResult) -> bool:
        """Record one case; returns False to stop the evaluation (pruned).

        At the prefix the candidate is released or pruned; at each later checkpoint (a multiple
        of the prefix length, short of the last case) it is pruned when it no longer beats the
        reference on the cases done, which rolls a released one back.
        """
        if result.score is None:
            return True
        self.scores[result.case] = result.score
        done = len(self.scores)
        if not self.decided:
            if done < self.prefix_len:
                return True
            self.decided = True
            self.partial = partial_score(self.scores)
            assert self.partial is not None
            if self.reference is None:
                return True
            beaten = self.reference.now().beaten_by(self.partial, self.scores)
            if beaten and self.release is not None:
                self.released_at = time.time()
                self.release(self.partial, dict(self.scores))
        elif self.reference is None or done % self.prefix_len or done >= self.total:
            return True
        else:
            beaten = self.reference.now().beaten_by(partial_score(self.scores) or 0.0, self.scores)
        if beaten or not self.prune:
            return True
        self.pruned = True
        return False


def confirmed(node: Node, pool: Pool) -> bool:
    """True when a released node's full score beats every other node in the pool."""
    assert node.score_full is not None and node.status == EVALUATED
    full = node.score_full if pool.maximize else -node.score_full
    other = next((n for n in pool.top(2) if n.id != node.id), None)
    return other is None or full > pool.score(other)


def taint_derived(items: Iterable[Item], rolled_back: str,
                  lineage: Mapping[str, str | None]) -> list[Item]:
    """Mark every item descended from the rolled-back node (at any depth) as stale; returns them.

    `lineage` maps node ids to parent ids for the run's nodes.
    """
    marked = []
    for item in items:
        if item.node is not None and item.node.id == rolled_back:
            continue
        if descends_from(item.parent.id, rolled_back, lineage):
            item.tainted_by = rolled_back
            marked.append(item)
    return marked


def descends_from(node_id: str | None, ancestor: str, lineage: Mapping[str, str | None]) -> bool:
    """True when `ancestor` is `node_id` or one of its ancestors."""
    seen: set[str] = set()
    while node_id is not None and node_id not in seen:
        if node_id == ancestor:
            return True
        seen.add(node_id)
        node_id = lineage.get(node_id)
    return False
