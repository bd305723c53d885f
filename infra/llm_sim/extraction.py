"""The simulator's deterministic answer to an extraction prompt: one item per unit of the source.

For each unit, the item's quote is the unit's first sentence of at least 40 characters, copied
from the text (whitespace collapsed, cut at a word after 300 characters); its title is the
unit's section title (else the sentence's first words), its idea that sentence, and it applies
"when working on <section>". No randomness: the same prompt gets the same answer.

>>> prompt = "Extraction request:\\n@@ § Use @@\\nShort. Cache every result that you compute more than once."
>>> answer = extraction_answer(prompt)
>>> print(answer)
1. Title: Use
Idea: Cache every result that you compute more than once.
Applies: when working on Use
Quote: "Cache every result that you compute more than once."
Where: § Use
"""

from __future__ import annotations

import re

from evoforge.infra.extraction_format import Proposal, prompt_units, render_proposals

MIN_QUOTE_CHARS = 40
MAX_QUOTE_CHARS = 300
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def first_sentence(text: str) -> str:
    """The text's first sentence of at least MIN_QUOTE_CHARS characters, whitespace collapsed
    (cut at a word boundary past MAX_QUOTE_CHARS); "" when there is none."""
    for sentence in _SENTENCE_END.split(text):
        flat = " ".join(sentence.split())
        if len(flat) >= MIN_QUOTE_CHARS:
            return flat if len(flat) <= MAX_QUOTE_CHARS else flat[:MAX_QUOTE_CHARS].rsplit(" ", 1)[0]
    return ""


def _section(locator: str) -> str:
    """The section a locator names: what follows its last "§" (its last path step), else ""."""
    if "§" not in locator:
        return ""
    return locator.rsplit("§", 1)[1].split(">")[-1].strip()


def extraction_answer(prompt: str) -> str:
    """One proposed item per unit of the extraction prompt that holds a long enough sentence."""
    proposals = []
    for locator, text in prompt_units(prompt):
        sentence = first_sentence(text)
        if not sentence:
            continue
        section = _section(locator)
        title = section or " ".join(sentence.split()[:6])
        proposals.append(Proposal(title=title, idea=sentence, applies=f"when working on {section or title}",
                                  quote=sentence, locator=locator))
    return render_proposals(proposals)
