"""A three-way merge of texts: what two descendants each changed in their common ancestor, both
kept (GEPA's merge of two Pareto-front candidates, for one-file artifacts).

The texts are cut into units: a sentence (up to `.`, `!` or `?` and any closing quote, before
white space) or the rest of a line, each with the white space before it, so that a prompt
written as one long line merges sentence by sentence. Each side's changes are the hunks of a
diff of units from the ancestor. Hunks that touch different ancestor units are all applied.
Two insertions at the same place are both kept, `ours` first (a unit both inserted, once). Hunks
that overlap otherwise conflict, and `ours` wins: the caller passes the better-scoring
descendant as `ours`.

    >>> ancestor = "Answer the question.\\nBe brief.\\n"
    >>> ours = "Answer the question.\\nBe brief.\\nStart with 'Answer:'.\\n"
    >>> theirs = "You are careful.\\nAnswer the question.\\nBe brief.\\nEnd with a period.\\n"
    >>> print(merge3(ancestor, ours, theirs), end="")
    You are careful.
    Answer the question.
    Be brief.
    Start with 'Answer:'.
    End with a period.
    >>> merge3(ancestor, "Answer the question.\\nBe terse.\\n", "Answer the question.\\nBe short.\\n")
    'Answer the question.\\nBe terse.\\n'
    >>> merge3("Be kind.", "Be kind. Say 'Answer:' first.", "Be kind. End with a period.")
    "Be kind. Say 'Answer:' first. End with a period."
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_UNIT = re.compile(r"""\s*[^\s](?:.*?[.!?]['")\]]*(?=\s|$)|.*?(?=\n)|.*$)|\s+$""")


@dataclass(frozen=True)
class Hunk:
    """Ancestor units [start, end) replaced by `lines` (start == end: an insertion)."""

    start: int
    end: int
    lines: tuple[str, ...]


def hunks(ancestor: list[str], side: list[str]) -> list[Hunk]:
    """The changes that turn `ancestor` into `side`, in order."""
    matcher = difflib.SequenceMatcher(a=ancestor, b=side, autojunk=False)
    return [Hunk(i1, i2, tuple(side[j1:j2]))
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def merge3(ancestor: str, ours: str, theirs: str) -> str:
    """`ancestor` with the changes of both sides (see the module docstring)."""
    base = units(ancestor)
    mine, other = hunks(base, units(ours)), hunks(base, units(theirs))
    kept = list(mine)
    for hunk in other:
        clash = [m for m in mine if _overlap(m, hunk)]
        if not clash:
            kept.append(hunk)
        elif all(_both_insert_at(m, hunk) for m in clash):
            for m in clash:  # both inserted here: ours, then the lines of theirs it lacks
                extra = tuple(x for x in hunk.lines if x not in m.lines)
                kept[kept.index(m)] = Hunk(m.start, m.end, m.lines + extra)
    out: list[str] = []
    at = 0
    for hunk in sorted(kept, key=lambda h: (h.start, h.end)):
        out.extend(base[at:hunk.start])
        out.extend(hunk.lines)
        at = max(at, hunk.end)
    out.extend(base[at:])
    return "".join(out)


def units(text: str) -> list[str]:
    """`text` cut into sentences or line rests, each with the white space before it (lines when
    the cut would not give the text back whole)."""
    cut = _UNIT.findall(text)
    return cut if "".join(cut) == text else text.splitlines(keepends=True)


def _overlap(a: Hunk, b: Hunk) -> bool:
    """Whether two hunks touch the same ancestor units (or insert at the same place)."""
    if a.start == a.end or b.start == b.end:  # an insertion clashes with a hunk around its point
        return a.start <= b.end and b.start <= a.end if (a.start == a.end) != (b.start == b.end) \
            else a.start == b.start
    return a.start < b.end and b.start < a.end


def _both_insert_at(a: Hunk, b: Hunk) -> bool:
    return a.start == a.end == b.start == b.end
