"""Behaviour features of a program for MAP-Elites, and the token shingles they are measured with.

Built-in features, both of the EVOLVE block and both scaled to [0, 1] against a reference
program (the run's first node, normally the seed):

- `complexity`: code tokens, as log2(size / reference size) mapped from [-1, 1] (half to double)
- `diversity`: Jaccard distance between token 3-shingle sets (0: same code, 1: nothing shared)

Any other name is a task metric read from `node.metrics`, scaled by `feature_ranges[name]`.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence, Set
from functools import lru_cache

from evoforge.infra.evolve_block import EditError, split_program
from evoforge.infra.nodes import Node

BUILTIN_FEATURES = ("complexity", "diversity")

_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+\.?\d*(?:[eE][-+]?\d+)?|\S")
_COMMENT = re.compile(r"#[^\n]*")


def evolve_block(code: str) -> str:
    """The EVOLVE block of a program (the whole program when it has no valid markers)."""
    try:
        return split_program(code).block
    except EditError:
        return code


def code_tokens(code: str) -> list[str]:
    """Tokens of the code with comments dropped (a cheap lexer, not Python's)."""
    return _TOKEN.findall(_COMMENT.sub("", code))


def shingles(tokens: Sequence[str], size: int = 3) -> set[int]:
    """Stable 32-bit hashes of every run of `size` consecutive tokens."""
    if len(tokens) < size:
        return {zlib.crc32("\x1f".join(tokens).encode())} if tokens else set()
    return {zlib.crc32("\x1f".join(tokens[i:i + size]).encode()) for i in range(len(tokens) - size + 1)}


def jaccard(a: Set[int], b: Set[int]) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def complexity(tokens: Sequence[str]) -> int:
    """Size of the code in tokens (comments excluded): a parse-free stand-in for AST size that
    also measures a block that does not parse on its own."""
    return max(len(tokens), 1)


@lru_cache(maxsize=1024)
def block_signature(code: str) -> tuple[int, frozenset[int]]:
    """Complexity and shingle set of a program's EVOLVE block (cached: re-measuring is common)."""
    tokens = code_tokens(evolve_block(code))
    return complexity(tokens), frozenset(shingles(tokens))


class FeatureSpace:
    """Maps a node to its MAP-Elites cell: one bin index per configured feature."""

    def __init__(self, names: Sequence[str], bins: int, ranges: dict[str, tuple[float, float]]):
        self.names, self.bins, self.ranges = list(names), bins, ranges
        self._reference: tuple[int, frozenset[int]] | None = None

    @property
    def has_reference(self) -> bool:
        return self._reference is not None

    def set_reference(self, node: Node) -> None:
        """Measure complexity and diversity relative to this node's code from now on."""
        self._reference = block_signature(node.code)

    def values(self, node: Node) -> list[float]:
        """The node's feature values, each in [0, 1]."""
        size, hashed = block_signature(node.code)
        ref_size, ref_shingles = self._reference or (size, frozenset())
        out = []
        for name in self.names:
            if name == "complexity":
                out.append((math.log2(size / ref_size) + 1.0) / 2.0)
            elif name == "diversity":
                out.append(1.0 - jaccard(hashed, ref_shingles) if ref_shingles else 0.0)
            else:
                low, high = self.ranges[name]
                value = _number(node.metrics.get(name), low)
                out.append((value - low) / (high - low))
        return [min(1.0, max(0.0, v)) for v in out]

    def cell(self, node: Node) -> tuple[int, ...]:
        """The grid cell of the node."""
        return tuple(min(self.bins - 1, int(v * self.bins)) for v in self.values(node))


def _number(value: object, default: float) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default
