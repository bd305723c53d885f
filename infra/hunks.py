"""A parent→child change as numbered hunks: what the Analyzer's claims point at, and the two
counterfactual programs a claim is tested with (the child with one hunk put back as in the
parent, and the parent with only that hunk applied).

Hunks are difflib's line opcodes with no context: each maximal run of changed lines is one hunk,
numbered from 1 in the order they appear. Example::

    >>> parent = "a = 1\\nkeep\\nb = 2\\n"
    >>> child = "a = 5\\nkeep\\nb = 7\\n"
    >>> [h.index for h in hunks(parent, child)]
    [1, 2]
    >>> revert(parent, child, 1)
    'a = 1\\nkeep\\nb = 7\\n'
    >>> only(parent, child, 2)
    'a = 1\\nkeep\\nb = 7\\n'
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Hunk:
    """One run of changed lines: the parent's lines [p_start, p_end) became the child's [c_start, c_end)."""

    index: int  # 1-based, in order
    p_start: int
    p_end: int
    c_start: int
    c_end: int
    removed: tuple[str, ...]
    added: tuple[str, ...]


def hunks(parent: str, child: str) -> list[Hunk]:
    """The numbered hunks that turn `parent` into `child` (none when they are equal).

    >>> [(h.removed, h.added) for h in hunks("x\\ny\\n", "x\\nz\\nw\\n")]
    [(('y\\n',), ('z\\n', 'w\\n'))]
    """
    old, new = parent.splitlines(keepends=True), child.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    out: list[Hunk] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.append(Hunk(len(out) + 1, i1, i2, j1, j2, tuple(old[i1:i2]), tuple(new[j1:j2])))
    return out


def revert(parent: str, child: str, hunk_index: int) -> str:
    """The child with hunk `hunk_index` put back as it was in the parent."""
    new = child.splitlines(keepends=True)
    hunk = _pick(hunks(parent, child), hunk_index)
    return "".join(new[:hunk.c_start] + list(hunk.removed) + new[hunk.c_end:])


def only(parent: str, child: str, hunk_index: int) -> str:
    """The parent with only hunk `hunk_index` of the change applied."""
    old = parent.splitlines(keepends=True)
    hunk = _pick(hunks(parent, child), hunk_index)
    return "".join(old[:hunk.p_start] + list(hunk.added) + old[hunk.p_end:])


def render_hunks(parent: str, child: str, limit: int = 6000) -> str:
    """The change as numbered `### Hunk k` sections of `-`/`+` lines, cut at `limit` characters.

    >>> print(render_hunks("a\\nb\\n", "a\\nc\\n"))
    ### Hunk 1 (parent line 2)
    ```diff
    -b
    +c
    ```
    """
    parts: list[str] = []
    size = 0
    found = hunks(parent, child)
    for hunk in found:
        where = (f"parent line {hunk.p_start + 1}" if hunk.p_end - hunk.p_start <= 1
                 else f"parent lines {hunk.p_start + 1}-{hunk.p_end}")
        if not hunk.removed:
            where = f"inserted after parent line {hunk.p_start}"
        body = [f"-{line.rstrip(chr(10))}" for line in hunk.removed]
        body += [f"+{line.rstrip(chr(10))}" for line in hunk.added]
        text = f"### Hunk {hunk.index} ({where})\n```diff\n" + "\n".join(body) + "\n```"
        if parts and size + len(text) > limit:
            parts.append(f"[... {len(found) - hunk.index + 1} more hunks cut]")
            break
        parts.append(text)
        size += len(text)
    return "\n".join(parts)


def _pick(found: list[Hunk], hunk_index: int) -> Hunk:
    if not 1 <= hunk_index <= len(found):
        raise ValueError(f"no hunk {hunk_index}: the change has {len(found)} hunk(s)")
    return found[hunk_index - 1]
