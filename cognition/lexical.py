"""A fallback embedder without a model: hashed word and character n-gram counts.

It matches shared words and word pieces only, never meaning, so it warns on every use.
"""

from __future__ import annotations

import hashlib
import logging
import re

import numpy as np

from evoforge.cognition.embedder import Embedder, unit_rows

log = logging.getLogger("evoforge.cognition")

_WORD = re.compile(r"[a-z0-9]+")
_NGRAM = 3


def _features(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    grams = []
    for word in words:
        padded = f"<{word}>"
        grams += [padded[i:i + _NGRAM] for i in range(max(1, len(padded) - _NGRAM + 1))]
    return [f"w:{w}" for w in words] + [f"c:{g}" for g in grams]


def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
    return digest % dim, 1.0 if (digest >> 63) & 1 else -1.0


class LexicalEmbedder(Embedder):
    """Hashed bag of words and character trigrams; chosen only by ``embedding: lexical``.

    >>> rows = LexicalEmbedder().embed(["best fit", "best fit"])
    >>> rows.shape, bool(abs(float(rows[0] @ rows[1]) - 1.0) < 1e-6)
    ((2, 384), True)
    """

    name = "lexical fallback (hashed word and character trigrams, no model)"

    def __init__(self, dim: int = 384) -> None:
        self._dim = dim

    @property
    def dim(self) -> int:
        """The number of hash buckets."""
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        """Sign-hashed, log-scaled feature counts, one unit row per text."""
        log.warning("cognition: embedding %d text(s) with the lexical fallback, which matches words, "
                    "not meaning; install 'evoforge[embed]' and use embedding: minilm", len(texts))
        rows = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            for feature in _features(text):
                index, sign = _bucket(feature, self._dim)
                row[index] += sign
        return unit_rows(np.sign(rows) * np.log1p(np.abs(rows)))
