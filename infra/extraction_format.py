"""The extraction prompt (`Extraction request:`) and its answer: candidate knowledge items, each with
a title, the idea, when it applies, the exact source quote and where it is.

The source text goes in as units, each opened by a line `@@ <locator> @@`. The answer is parsed
leniently, as small models write it: `Title:` or `**Title:**`, numbered or bulleted items, quotes
in quotation marks or not, a field's text running on over the next lines.

>>> prompt = extraction_prompt("a.md", [("§ Use", "Cache the results.")])
>>> is_extraction_prompt(prompt), prompt_units(prompt)
(True, [('§ Use', 'Cache the results.')])
>>> answer = ("1. **Title:** Cache\\n**Idea**: keep results\\nApplies: always\\n"
...           "Quote: \\"Cache the results.\\"\\nWhere: § Use")
>>> parse_proposals(answer)
[Proposal(title='Cache', idea='keep results', applies='always', quote='Cache the results.', locator='§ Use')]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

EXTRACTION_MARKER = "Extraction request:"
SOURCE_LINE = "Source: "
END_OF_SOURCE = "end of source"  # the `@@ end of source @@` line after the last unit
REMINDER = ("Now write the items found in the source text above, numbered, each with its lines "
            "Title:, Idea:, Applies:, Quote: and Where:.")
_UNIT_LINE = re.compile(r"^@@ (.+) @@$", re.M)
_FIELDS = {"title": "title", "idea": "idea", "applies": "applies", "when": "applies", "quote": "quote",
           "where": "locator", "locator": "locator", "location": "locator"}
_FIELD_LINE = re.compile(
    r"^[\s>*_#\-+]*(?:\(?\d+[.)]\s*|item\s*\d*[.:)]?\s*)?[*_]*\s*"
    r"(title|idea|applies|when(?: it applies)?|quote|where|locator|location)\b"
    r"[^:\n]{0,20}?[*_]*\s*:[*_]*\s*(.*)$",
    re.I)
_NEW_ITEM = re.compile(r"^\s*(?:#{1,6}\s*)?[*_]*\s*(?:item\s*\d+|\d+[.)])(?:\s|$|[*_:])", re.I)
_QUOTES = "\"'“”‘’`«»"

INSTRUCTIONS = f"""{EXTRACTION_MARKER} read the source text below and write down the pieces of
knowledge in it that would help someone write or improve a program: techniques, rules,
pitfalls, parameters that matter. For each item write these five lines:

Title: a few words naming it
Idea: the idea in one or two sentences, in your own words
Applies: when it applies
Quote: one sentence copied exactly, word for word, from the source text
Where: the location shown on the @@ line above that sentence

Number the items 1., 2., ... Write no item whose quote you cannot copy from the text. Write
"none" when the text holds no such knowledge."""


@dataclass(frozen=True)
class Proposal:
    """One candidate item as the model wrote it (fields it left out are empty)."""

    title: str = ""
    idea: str = ""
    applies: str = ""
    quote: str = ""
    locator: str = ""


def unit_block(locator: str, text: str) -> str:
    """One unit of source text as it appears in the prompt."""
    return f"@@ {locator} @@\n{text}"


def extraction_prompt(source: str, units: Sequence[tuple[str, str]]) -> str:
    """The prompt asking for items in these (locator, text) units of the file `source`."""
    body = "\n\n".join(unit_block(locator, text) for locator, text in units)
    return f"{INSTRUCTIONS}\n\n{SOURCE_LINE}{source}\n\n{body}\n\n@@ {END_OF_SOURCE} @@\n{REMINDER}\n"


def is_extraction_prompt(prompt: str) -> bool:
    """True for a prompt that asks for knowledge items extracted from a source text."""
    return prompt.startswith(EXTRACTION_MARKER) or f"\n{EXTRACTION_MARKER}" in prompt


def prompt_units(prompt: str) -> list[tuple[str, str]]:
    """The (locator, text) units of an extraction prompt, in order."""
    marks = list(_UNIT_LINE.finditer(prompt))
    ends = [m.start() for m in marks[1:]] + [len(prompt)]
    return [(m.group(1), prompt[m.end():end].strip()) for m, end in zip(marks, ends, strict=True)
            if m.group(1) != END_OF_SOURCE]


def _clean(value: str) -> str:
    """The value without its markdown emphasis and quotation marks around it (inside kept as written)."""
    return " ".join(value.split()).strip(_QUOTES + " *_").strip()


def parse_proposals(answer: str) -> list[Proposal]:
    """Every item the answer writes (at least one field), in order; text without fields gives none."""
    items: list[dict[str, str]] = []
    field = ""
    for line in answer.splitlines():
        match = _FIELD_LINE.match(line)
        if match:
            name = _FIELDS[match.group(1).lower().split()[0]]
            if not items or name in items[-1] or (_NEW_ITEM.match(line) and items[-1]):
                items.append({})
            items[-1][name] = match.group(2)
            field = name
        elif _NEW_ITEM.match(line) and items and items[-1]:
            items.append({})
            field = ""
            rest = _NEW_ITEM.sub("", line, count=1).strip(" *_:")
            if rest:
                items[-1]["title"] = rest
        elif field and items and line.strip():
            items[-1][field] += " " + line.strip()
        else:
            field = ""
    return [Proposal(**{name: _clean(value) for name, value in item.items()}) for item in items if item]


def render_proposals(proposals: Sequence[Proposal]) -> str:
    """Items in the answer format the prompt asks for (what the simulator answers)."""
    blocks = [f"{n}. Title: {p.title}\nIdea: {p.idea}\nApplies: {p.applies}\nQuote: \"{p.quote}\"\n"
              f"Where: {p.locator}" for n, p in enumerate(proposals, start=1)]
    return "\n\n".join(blocks) if blocks else "none"
