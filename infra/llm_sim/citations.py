"""The lines a simulated research answer uses to cite what its prompt showed it.

A real LLM names the prior knowledge (`Ideas used: K2`) and the inspirations
(`Inspirations used: 1`) its change draws on; the simulator cites, seeded, one of those it was
shown (or none), so that runs over it exercise the origin bookkeeping end to end.
"""

from __future__ import annotations

import random
import re

_KNOWLEDGE = re.compile(r"^### K(\d+): ", re.MULTILINE)
_INSPIRATION = re.compile(r"^### Inspiration (\d+): ", re.MULTILINE)
CITE_KNOWLEDGE, CITE_INSPIRATION = 0.6, 0.3  # how often a shown item is cited


def citation_lines(prompt: str, rng: random.Random) -> str:
    """`Ideas used:` / `Inspirations used:` lines for the items the prompt numbers, or ''."""
    lines = []
    knowledge = _KNOWLEDGE.findall(prompt)
    if knowledge:
        cited = rng.choice(knowledge) if rng.random() < CITE_KNOWLEDGE else None
        lines.append(f"Ideas used: K{cited}" if cited else "Ideas used: none")
    inspirations = _INSPIRATION.findall(prompt)
    if inspirations:
        cited = rng.choice(inspirations) if rng.random() < CITE_INSPIRATION else None
        lines.append(f"Inspirations used: {cited}" if cited else "Inspirations used: none")
    return "\n".join(lines)
