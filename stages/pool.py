"""The evaluated population held in memory, with the version counter the commit stage bumps."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from evoforge.infra.nodes import EVALUATED, Node


def normalized_code_hash(code: str) -> str:
    """A hash of the code with comments, blank lines and trailing whitespace removed."""
    lines = []
    for line in code.splitlines():
        stripped = re.sub(r"\s+#.*$", "", line).rstrip()
        if stripped and not stripped.lstrip().startswith("#"):
            lines.append(stripped)
    return hashlib.sha1("\n".join(lines).encode()).hexdigest()


@dataclass
class Pool:
    """Evaluated nodes, the best one, and version `v` (bumped when the pool changes in a way that matters)."""

    maximize: bool = True
    v: int = 0
    nodes: list[Node] = field(default_factory=list)
    best: Node | None = None
    seen_hashes: set[str] = field(default_factory=set)

    def score(self, node: Node) -> float:
        """Selection score: the full-stage score, signed so that larger is better."""
        value = node.score_full
        assert value is not None
        return value if self.maximize else -value

    def better(self, a: Node, b: Node | None) -> bool:
        return b is None or self.score(a) > self.score(b)

    def add(self, node: Node) -> bool:
        """Add an evaluated node; returns True (and bumps v) when it is a new best."""
        self.nodes.append(node)
        if self.better(node, self.best):
            self.best = node
            self.v += 1
            return True
        return False

    def remember(self, code: str) -> None:
        """Record a program as seen, evaluated or not, for the duplicate check."""
        self.seen_hashes.add(normalized_code_hash(code))

    def is_duplicate(self, code: str) -> bool:
        return normalized_code_hash(code) in self.seen_hashes

    def ranked(self) -> list[Node]:
        """Evaluated nodes, best first."""
        return sorted(self.nodes, key=self.score, reverse=True)

    @classmethod
    def rebuild(cls, nodes: list[Node], maximize: bool, v: int) -> Pool:
        """The pool as it was, from the node database (resume)."""
        pool = cls(maximize=maximize)
        for node in nodes:
            pool.remember(node.code)
            if node.status == EVALUATED and node.score_full is not None:
                pool.add(node)
        pool.v = max(v, pool.v)
        return pool
