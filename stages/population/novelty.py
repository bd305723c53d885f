"""The novelty check before evaluation: near-duplicates of pool programs, optionally, are rejected.

Exact and normalised repeats (comments, blank lines and spacing ignored) of a program already
evaluated in the run are not evaluated either: the engineer serves them the recorded result
(stages/population/repeats.py). With `search.novelty_threshold` set, a candidate whose EVOLVE block is at
least that similar to a pool member's is rejected too. Similarity is a pluggable `Similarity`:
the default estimates the Jaccard similarity of token 3-shingles with MinHash (cheap, no model);
`search.novelty_backend: embedding` uses the cosine of the cognition base's sentence embeddings
instead (`EmbeddingSimilarity`, which catches the same idea written with other names).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from evoforge.cognition.embedder import Embedder
from evoforge.infra.code_tokens import code_tokens, evolve_block, shingles
from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool

_PRIME = 4294967311  # > 2**32, so every 32-bit shingle hash is a distinct residue
_GROW = 1024


class Similarity(Protocol):
    """Turns programs into vectors and says how alike a vector is to each row of a matrix."""

    name: str

    def vector(self, code: str) -> np.ndarray: ...

    def similarities(self, matrix: np.ndarray, vector: np.ndarray) -> np.ndarray: ...


class MinHashJaccard:
    """Estimated Jaccard similarity of the EVOLVE blocks' token 3-shingle sets (MinHash).

        >>> sim = MinHashJaccard()
        >>> a = sim.vector("x = 1\\ny = 2\\n")
        >>> float(sim.similarities(np.stack([a]), a)[0])
        1.0
    """

    name = "minhash-jaccard"

    def __init__(self, permutations: int = 128, seed: int = 20240531):
        rng = np.random.default_rng(seed)
        self._a = rng.integers(1, 2**31, size=permutations, dtype=np.uint64)
        self._b = rng.integers(0, 2**31, size=permutations, dtype=np.uint64)

    def vector(self, code: str) -> np.ndarray:
        hashed = shingles(code_tokens(evolve_block(code)))
        if not hashed:
            return np.full(len(self._a), _PRIME, dtype=np.uint64)
        values = np.fromiter(hashed, dtype=np.uint64, count=len(hashed))
        return ((self._a[:, None] * values[None, :] + self._b[:, None]) % _PRIME).min(axis=1)

    def similarities(self, matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
        return (matrix == vector).mean(axis=1)


class EmbeddingSimilarity:
    """Cosine similarity of sentence embeddings of the EVOLVE blocks (the cognition embedder)."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder
        self.name = f"embedding cosine ({embedder.name})"

    def vector(self, code: str) -> np.ndarray:
        return self.embedder.embed([evolve_block(code)])[0]

    def similarities(self, matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
        return matrix @ vector  # the embedder's rows are unit vectors


class SimilarityIndex:
    """Vectors of the pool's programs, kept in step with the pool as one of its listeners."""

    def __init__(self, similarity: Similarity):
        self.similarity = similarity
        self.ids: list[str] = []
        self._matrix: np.ndarray | None = None

    def add(self, node: Node) -> None:
        vector = self.similarity.vector(node.code)
        if self._matrix is None:
            self._matrix = np.zeros((_GROW, len(vector)), dtype=vector.dtype)
        if len(self.ids) == len(self._matrix):
            self._matrix = np.concatenate([self._matrix, np.zeros_like(self._matrix)])
        self._matrix[len(self.ids)] = vector
        self.ids.append(node.id)

    def remove(self, node: Node) -> None:
        if node.id not in self.ids:
            return
        at, size = self.ids.index(node.id), len(self.ids)
        assert self._matrix is not None
        self._matrix[at:size - 1] = self._matrix[at + 1:size]
        del self.ids[at]

    def nearest(self, code: str) -> tuple[float, str | None]:
        """The highest similarity of `code` to a pool program, and that program's node id."""
        if not self.ids or self._matrix is None:
            return 0.0, None
        scores = self.similarity.similarities(self._matrix[:len(self.ids)], self.similarity.vector(code))
        at = int(np.argmax(scores))
        return float(scores[at]), self.ids[at]


def similarity_index(pool: Pool, similarity: Similarity | None = None) -> SimilarityIndex:
    """The pool's similarity index for this backend (default MinHash), built on first use."""
    similarity = similarity or MinHashJaccard()
    for listener in pool.listeners:
        if isinstance(listener, SimilarityIndex) and listener.similarity.name == similarity.name:
            return listener
    index = SimilarityIndex(similarity)
    for node in pool.nodes:
        index.add(node)
    pool.listeners.append(index)
    return index


def novelty_rejection(code: str, pool: Pool, cfg: SearchConfig,
                      similarity: Similarity | None = None) -> str | None:
    """Why `code` is too like a pool program to evaluate (`search.novelty_threshold`), or None."""
    if cfg.novelty_threshold is None or not pool.nodes:
        return None
    index = similarity_index(pool, similarity)
    score, node_id = index.nearest(code)
    if score >= cfg.novelty_threshold:
        return (f"too similar to node {node_id}: {index.similarity.name} {score:.3f} "
                f">= novelty_threshold {cfg.novelty_threshold}")
    return None
