"""The Analyzer's causal claims, parsed from its `## Claims` section: one line per claim, which
hunk of the diff it credits, the direction (in the objective's terms: better or worse) and how
much (a number, when it gives one).

A small model writes these sloppily, so the parser takes bullets or numbers or none, `hunk 2`,
`Hunk #2`, `(hunk 2)`, score words (raised, up, increased; lowered, down, decreased) or objective
words (improved, better; worsened, worse, hurt), and a signed or unsigned number. A line it cannot
read is kept as text and counted, never an error. Example::

    >>> parsed = parse_claims("- hunk 2: raised the score by about 0.05\\n- the rest is noise", True)
    >>> parsed.claims[0]
    Claim(hunk=2, direction='better', magnitude=0.05, text='hunk 2: raised the score by about 0.05')
    >>> parsed.unparsed
    ['the rest is noise']
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

BETTER, WORSE = "better", "worse"  # a claim's direction, in the objective's terms
MAX_CLAIMS = 10  # lines read from one section (a runaway answer stops here)

_NONE_RE = re.compile(r"^(?:none|n/?a|no (?:causal )?claims?)\b", re.I)
_BULLET_RE = re.compile(r"^[ \t]*(?:[-*+\u2022]|\d+[.)])[ \t]+")
_HUNK_RE = re.compile(r"\bhunks?[ \t]*(?:#|no\.?|number)?[ \t]*(\d+)", re.I)
_UP = ("raised", "raises", "raise", "increased", "increases", "increase", "up", "higher", "boosted",
       "rose", "grew", "gained", "added")
_DOWN = ("lowered", "lowers", "lower", "decreased", "decreases", "decrease", "down", "reduced",
         "reduces", "dropped", "drops", "fell", "cut", "lost")
_BETTER = ("improved", "improves", "improve", "better", "helped", "helps")
_WORSE = ("worsened", "worsens", "worsen", "worse", "hurt", "hurts", "harmed", "degraded", "broke")
_WORD_RE = re.compile(r"\b(" + "|".join(_UP + _DOWN + _BETTER + _WORSE) + r")\b", re.I)
_NUM = r"[+-]?\d+\.?\d*(?:[eE][+-]?\d+)?"
_FROM_TO_RE = re.compile(rf"\bfrom\s+({_NUM})\s+to\s+({_NUM})")
_NUMBER_RE = re.compile(r"(?<![\w.])([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(\s*%)?")


@dataclass(frozen=True)
class Claim:
    """One causal claim: hunk `hunk` made the score `direction` (better or worse) by `magnitude`."""

    hunk: int
    direction: str
    magnitude: float | None
    text: str


@dataclass(frozen=True)
class ParsedClaims:
    """The claims read from a section, and the lines that could not be read as one."""

    claims: list[Claim] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)


def claim_lines(section: str) -> list[str]:
    """The section's claim lines: non-empty lines without their bullets ('none' gives none).

    >>> claim_lines("- hunk 1: up by 2\\n\\n* none")
    ['hunk 1: up by 2']
    """
    lines = []
    for raw in section.splitlines():
        line = _BULLET_RE.sub("", raw).strip().strip("*_` ").strip()
        if line and not _NONE_RE.match(line):
            lines.append(line)
    return lines[:MAX_CLAIMS]


def parse_claim(line: str, maximize: bool) -> Claim | None:
    """The claim of one line (None when it names no single hunk or no direction).

    >>> parse_claim("Hunk #1 lowered the score (-0.3)", True)
    Claim(hunk=1, direction='worse', magnitude=0.3, text='Hunk #1 lowered the score (-0.3)')
    >>> parse_claim("hunk 3 improved it", False).direction, parse_claim("hunk 3: up 2", False).direction
    ('better', 'worse')
    >>> parse_claim("hunk 1 raised the score from 0.5 to 0.75", True).magnitude
    0.25
    >>> parse_claim("hunks 1 and 2 raised it", True) is None
    True
    """
    found = _HUNK_RE.findall(line)
    if len({int(n) for n in found}) != 1 or re.search(r"\bhunks\b.*\band\b", line, re.I):
        return None
    hunk = int(found[0])
    match = _HUNK_RE.search(line)
    assert match is not None
    rest = line[match.end():]
    word = _WORD_RE.search(rest) or _WORD_RE.search(line[:match.start()])
    number, percent = _number(rest)
    span = _FROM_TO_RE.search(rest)
    if span is not None:  # "from 0.5 to 0.7": the change, not the first number
        number, percent = float(span.group(2)) - float(span.group(1)), False
    if word is not None:
        up = _direction_up(word.group(1).lower(), maximize)
    elif number is not None and number != 0 and not percent:
        up = number > 0  # "hunk 2: +0.05"
    else:
        return None
    direction = BETTER if up == maximize else WORSE
    magnitude = abs(number) if number is not None and not percent else None
    return Claim(hunk, direction, magnitude, line)


def parse_claims(section: str, maximize: bool) -> ParsedClaims:
    """Every claim of a Claims section, and the lines that are not one (kept as text)."""
    parsed = ParsedClaims()
    for line in claim_lines(section):
        claim = parse_claim(line, maximize)
        if claim is None:
            parsed.unparsed.append(line)
        else:
            parsed.claims.append(claim)
    return parsed


def claim_line(hunk: int, raised: bool, magnitude: float | None) -> str:
    """A claim as the Analyzer is asked to write it.

    >>> claim_line(2, True, 0.05)
    'hunk 2: raised the score by about 0.05'
    """
    how = "raised" if raised else "lowered"
    return f"hunk {hunk}: {how} the score" + ("" if magnitude is None else f" by about {magnitude:.6g}")


def _direction_up(word: str, maximize: bool) -> bool:
    """Whether `word` says the score went up."""
    if word in _UP:
        return True
    if word in _DOWN:
        return False
    return (word in _BETTER) == maximize  # objective words: better is up when maximizing


def _number(text: str) -> tuple[float | None, bool]:
    """The first number in `text`, and whether it is a percentage."""
    match = _NUMBER_RE.search(text)
    if match is None:
        return None, False
    return float(match.group(1)), bool(match.group(2))
