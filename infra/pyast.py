"""`ast.parse` that survives a CPython 3.11.0–3.11.7 race.

Those versions keep the AST constructor's recursion counter in interpreter-wide state, so two
threads parsing at once (Prefect parses source on its own threads while our flow runs) can make
a parse that succeeded raise ``SystemError: AST constructor recursion depth mismatch``
(CPython gh-106905, fixed in 3.11.8). The tree was built correctly; parsing again is safe.
"""

from __future__ import annotations

import ast
from functools import lru_cache

_RETRIES = 50


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """Parse Python source into a module AST, retrying the spurious 3.11 SystemError."""
    for attempt in range(_RETRIES):
        try:
            return ast.parse(source, filename=filename)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == _RETRIES - 1:
                raise
    raise AssertionError("unreachable")


@lru_cache(maxsize=256)
def parse_program(source: str) -> ast.Module:
    """`parse` of a candidate's program, once: the guardrails, the knob space and the hard-coded
    value check all read the same tree (callers must not change it). A SyntaxError is raised
    each time."""
    return parse(source, "<candidate>")
