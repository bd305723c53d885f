"""Behaviour features of a program for MAP-Elites, measured on token shingles (infra/code_tokens.py).

Built-in features, both of the EVOLVE block and both scaled to [0, 1] against a reference
program (the run's first node, normally the seed):

- `complexity`: code tokens, as log2(size / reference size) mapped from [-1, 1] (half to double)
- `diversity`: Jaccard distance between token 3-shingle sets (0: same code, 1: nothing shared)

Any other name is a task metric read from `node.metrics`, scaled by `feature_ranges[name]`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from evoforge.infra.code_tokens import (
    block_signature,
    jaccard,
)
from evoforge.infra.nodes import Node

BUILTIN_FEATURES = ("complexity", "diversity")

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
