"""Code as tokens: the EVOLVE block, a cheap lexer, token 3-shingles and their Jaccard
similarity, the measures MAP-Elites' features (stages/sample/features.py) and the novelty gate
(stages/population/novelty.py) are made of.

    >>> code_tokens("x = f(1.5)  # set x")
    ['x', '=', 'f', '(', '1.5', ')']
    >>> round(jaccard(shingles(code_tokens("a = b + c")), shingles(code_tokens("a = b + d"))), 2)
    0.5
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence, Set
from functools import lru_cache

from evoforge.infra.evolve_block import EditError, split_program

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
