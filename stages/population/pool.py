"""The evaluated population held in memory, with the version counter the commit stage bumps.

Selection uses one fitness, `Pool.score`: the task score signed so that larger is better, plus,
when an LLM judge is on (`judge.weight > 0`) and has scored the node, a bonus
`judge_weight * score * judge_scale`, its `JudgeData.score` in [0, 1] (the judge's N/10), and
`judge_scale` is the magnitude of the seed's full score (set by whoever builds the pool, before
any node is added: the ranking keeps the fitness it had when a node came in), so a weight of 0.1
is worth at most 10% of the seed's score. The bonus always makes a node better (it
lowers the effective score of a minimised task). The raw task score stays in the node's score
column and in status.json's `best_score`.

The pool ranks by one evaluation level, `level`: `full` for a plain task, `pilot` for a gated
ML task (the search level; promotion adds full scores beside it, and final scores never reach a
node at all).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from evoforge.infra.nodes import EVALUATED, SPECULATIVE, Node
from evoforge.stages.judge_data import JudgeData

_LEXEME = re.compile(
    r'[rRbBuUfF]{0,2}(?:"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')'
    r"|#[^\n]*|\\\n|\n[ \t]*|[A-Za-z_]\w*|\d[\w.]*|[^\s]"
)


def normalized_code(code: str) -> str:
    """The code as its tokens one space apart: comments, blank lines and spacing inside lines
    dropped, indentation (which carries meaning) and string contents kept."""
    out: list[str] = []
    for match in _LEXEME.finditer(code.expandtabs(8)):
        text = match.group()
        if text.startswith("#") or text == "\\\n":
            continue
        if text.startswith("\n"):
            if out and out[-1].startswith("\n"):
                out[-1] = text  # a blank line: keep only the last indentation
            elif out:
                out.append(text)
            continue
        out.append(text)
    while out and out[-1].startswith("\n"):
        out.pop()
    return " ".join(out)


@lru_cache(maxsize=4096)
def normalized_code_hash(code: str) -> str:
    """A hash of the code with comments, blank lines and spacing inside lines removed."""
    return hashlib.sha1(normalized_code(code).encode()).hexdigest()


@dataclass
class Pool:
    """Evaluated nodes, the best one, and version `v` (bumped when the pool changes in a way that matters).

    A ranking is kept up to date on every add/remove, so `best`, `top(k)` and `ranked()` never
    sort. A node whose score changes in place (a speculation confirmed) must go through
    `rescore` so that the ranking follows.
    """

    maximize: bool = True
    level: str = "full"  # the evaluation level whose score ranks the pool (the search level)
    v: int = 0
    nodes: list[Node] = field(default_factory=list)
    best: Node | None = None
    judge_weight: float = 0.0  # weight of the LLM judge's score in the fitness (0: off)
    judge_scale: float = 1.0  # |the seed's full score|: puts judge_score in the task's units
    _keys: list[float] = field(default_factory=list, repr=False, compare=False)  # -score, ascending
    _ranking: list[Node] = field(default_factory=list, repr=False, compare=False)
    _by_id: dict[str, Node] = field(default_factory=dict, repr=False, compare=False)
    _ranked_key: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    listeners: list[Any] = field(default_factory=list, repr=False, compare=False)  # add(node)/remove(node)

    def value(self, node: Node) -> float | None:
        """The node's task score at the pool's level (its validation-prefix score while speculative)."""
        return node.score_partial if node.status == SPECULATIVE else node.score(self.level)

    def score(self, node: Node) -> float:
        """Selection score, signed so that larger is better: the score at the pool's level, or the
        validation-prefix score of a speculative node, plus the judge bonus (module docstring)."""
        value = self.value(node)
        assert value is not None
        signed = value if self.maximize else -value
        judged = JudgeData.peek(node).score
        if judged is not None and self.judge_weight:
            signed += self.judge_weight * judged * self.judge_scale
        return signed

    def better(self, a: Node, b: Node | None) -> bool:
        return b is None or self.score(a) > self.score(b)

    def add(self, node: Node) -> bool:
        """Add an evaluated node; returns True (and bumps v) when it is a new best."""
        self.nodes.append(node)
        self._index(node)
        for listener in self.listeners:
            listener.add(node)
        if self.better(node, self.best):
            self.best = node
            self.v += 1
            return True
        return False

    def remove(self, node: Node) -> bool:
        """Take a node out (a rolled-back speculation); returns True (and bumps v) if it was the best."""
        if node.id not in self._by_id:
            return False
        self.nodes = [n for n in self.nodes if n.id != node.id]
        self._unindex(node)
        for listener in self.listeners:
            listener.remove(node)
        if self.best is None or self.best.id != node.id:
            return False
        self.best = self._ranking[0] if self._ranking else None
        self.v += 1
        return True

    def rescore(self, node: Node) -> bool:
        """Re-rank a node whose score or status changed in place; returns True (and bumps v) when
        that changed which node is best."""
        if node.id not in self._by_id:
            return False
        before = self.best
        self._unindex(node)
        self._index(node)
        self.best = self._ranking[0]
        if before is None or self.best.id != before.id:
            self.v += 1
            return True
        return False

    def get(self, node_id: str | None) -> Node | None:
        """The pool node with this id, or None."""
        return self._by_id.get(node_id) if node_id is not None else None

    def ranked(self) -> list[Node]:
        """Evaluated nodes, best first (equal scores: earliest added first)."""
        return list(self._ranking)

    def best_confirmed(self) -> Node | None:
        """The best fully evaluated node (speculative ones skipped), without sorting."""
        return next((n for n in self._ranking if n.status == EVALUATED), None)

    def winner(self) -> Node | None:
        """The search's answer: the best confirmed node at the pool's level, or, when the pool
        ranks by `pilot`, the best node that a promotion scored at `full` (if any was)."""
        if self.level == "full":
            return self.best_confirmed()
        promoted = [n for n in self._ranking if n.status == EVALUATED and n.score_full is not None]
        if not promoted:
            return self.best_confirmed()
        pick = max if self.maximize else min
        return pick(promoted, key=lambda n: n.score_full)  # type: ignore[arg-type,return-value]

    def winner_level(self, node: Node) -> str:
        """The level of the score the winner is judged on."""
        return "full" if node.score_full is not None else self.level

    def top(self, k: int) -> list[Node]:
        """The k best nodes, best first, without sorting."""
        return self._ranking[:k]

    def score_range(self) -> tuple[float, float]:
        """The lowest and highest selection score in the pool (0, 0 when empty)."""
        if not self._keys:
            return 0.0, 0.0
        return -self._keys[-1], -self._keys[0]

    def normalized(self, node: Node) -> float:
        """The node's score scaled to [0, 1] between the worst and the best in the pool."""
        low, high = self.score_range()
        return (self.score(node) - low) / (high - low) if high > low else 1.0

    def _index(self, node: Node) -> None:
        key = -self.score(node)
        at = bisect.bisect_right(self._keys, key)
        self._keys.insert(at, key)
        self._ranking.insert(at, node)
        self._by_id[node.id] = node
        self._ranked_key[node.id] = key

    def _unindex(self, node: Node) -> None:
        key = self._ranked_key.pop(node.id)
        at = bisect.bisect_left(self._keys, key)
        while self._ranking[at].id != node.id:
            at += 1
        del self._keys[at]
        del self._ranking[at]
        del self._by_id[node.id]

    @classmethod
    def rebuild(cls, nodes: list[Node], maximize: bool, v: int, judge_weight: float = 0.0,
                judge_scale: float = 1.0, level: str = "full") -> Pool:
        """The pool as it was, from the node database (resume); no judge unless a weight is given."""
        pool = cls(maximize=maximize, judge_weight=judge_weight, judge_scale=judge_scale, level=level)
        members = [n for n in nodes if n.status == EVALUATED and n.score(level) is not None]
        for node in members:  # no new-best bookkeeping per node: one sort at the end
            pool.nodes.append(node)
            pool._by_id[node.id] = node
            pool._ranked_key[node.id] = -pool.score(node)
            if pool.better(node, pool.best):
                pool.best = node
                pool.v += 1
        order = sorted(range(len(members)), key=lambda i: pool._ranked_key[members[i].id])
        pool._ranking = [members[i] for i in order]
        pool._keys = [pool._ranked_key[n.id] for n in pool._ranking]
        pool.v = max(v, pool.v)
        return pool
