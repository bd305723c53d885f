"""A small cognition table held in memory, searched by one matrix product instead of a LanceDB
query (exact nearest neighbours by cosine similarity, as LanceDB's flat search gives them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

SMALL_ROWS = 2048  # up to this many rows a base is searched in memory (one table read per version)


@dataclass(frozen=True)
class TableSnapshot:
    """Every row of one table version: the rows' fields, their unit vectors, their tasks."""

    rows: list[dict[str, Any]]
    vectors: np.ndarray  # float32, one unit row per item (a zero vector stays zero)
    tasks: list[str | None]

    @classmethod
    def of(cls, rows: list[dict[str, Any]], dim: int) -> TableSnapshot:
        """The snapshot of `rows` (dicts with a `vector` and a `task`), vectors of `dim` floats."""
        vectors = np.asarray([row["vector"] for row in rows], dtype=np.float32).reshape(len(rows), dim)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms > 0, norms, 1.0).astype(np.float32)
        return cls(rows, vectors, [row["task"] for row in rows])

    def nearest(self, vector: np.ndarray, k: int, task: str | None,
                keep: Callable[[dict[str, Any]], bool] | None = None) -> list[tuple[dict[str, Any], float]]:
        """The `k` rows (of `task` or task-less ones, when given; those `keep` accepts, when given)
        most similar to `vector`, best first, each with its cosine similarity (ties in table order).

        >>> rows = [{"vector": [1.0, 0.0], "task": "a"}, {"vector": [0.6, 0.8], "task": None},
        ...         {"vector": [0.0, 1.0], "task": "b"}]
        >>> snap = TableSnapshot.of(rows, 2)
        >>> [(r["vector"], round(s, 2)) for r, s in snap.nearest(np.array([0.0, 1.0]), 2, "a")]
        [([0.6, 0.8], 0.8), ([1.0, 0.0], 0.0)]
        >>> [r["vector"] for r, _ in snap.nearest(np.array([0.0, 1.0]), 2, "a", lambda r: r["task"] == "a")]
        [[1.0, 0.0]]
        """
        if not self.rows or k < 1:
            return []
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        similarity = self.vectors @ (query / norm if norm > 0 else query)
        # as LanceDB returns it: 1 - its float32 cosine distance
        distance = np.float32(1.0) - similarity.astype(np.float32)
        allowed = np.arange(len(self.rows))
        if task is not None:
            allowed = allowed[[t is None or t == task for t in self.tasks]]
        if keep is not None:
            allowed = allowed[[keep(self.rows[i]) for i in allowed]]
        best = allowed[np.argsort(distance[allowed], kind="stable")[:k]]
        return [(self.rows[i], 1.0 - float(distance[i])) for i in best]
