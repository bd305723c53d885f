"""The embedding backend contract: texts in, L2-normalised float32 rows out."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Embedder(ABC):
    """Turns texts into unit vectors; ``name`` and ``dim`` identify the vector space.

    A cognition base remembers the name and dimension it was built with, so vectors from two
    different spaces are never compared.
    """

    name: str
    # names of other embedders whose vectors agree with this one's (the same model, another runtime):
    # a base built by one of them is searched by this one
    same_space: frozenset[str] = frozenset()

    @property
    @abstractmethod
    def dim(self) -> int:
        """The vector dimension."""

    @abstractmethod
    def embed(self, texts: list[str]) -> np.ndarray:
        """One float32 row per text, each of unit L2 norm, shape ``(len(texts), dim)``."""


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """The rows scaled to unit L2 norm (a zero row stays zero), as float32."""
    rows = np.asarray(vectors, dtype=np.float32)
    if rows.ndim != 2:
        raise ValueError(f"expected a 2-d array of vectors, got shape {rows.shape}")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0).astype(np.float32)
