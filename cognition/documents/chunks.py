"""Units packed in order into chunks whose extraction prompt fits the model's context window.

Tokens are estimated as the LLM client counts them (`infra/llm/spending.prompt_tokens`: a token per
3 characters). The budget is the window minus the answer's room minus the prompt's fixed part
minus a margin for the chat template; a unit larger than that is split at paragraph, then
sentence, then word bounds, each piece keeping the unit's locator.

>>> units = [Unit("page 1", "a" * 900), Unit("page 2", "b" * 300)]
>>> [[u.locator for u in chunk] for chunk in pack(units, 150)]
[['page 1'], ['page 1'], ['page 1', 'page 2']]
"""

from __future__ import annotations

import math
import re

from evoforge.cognition.documents.units import Unit
from evoforge.cognition.errors import CognitionError
from evoforge.infra.extraction_format import extraction_prompt, unit_block
from evoforge.infra.llm.spending import prompt_tokens

DEFAULT_WINDOW = 4096  # tokens, when neither the flag, the config nor the server says
MARGIN = 32  # tokens kept free for the chat template's own markers
_BOUNDS = (re.compile(r"\n\s*\n"), re.compile(r"(?<=[.!?])\s+"), re.compile(r"\s+"))


def _tokens(text: str) -> int:
    return math.ceil((len(text) + 2) / 3)


def chunk_budget(window: int, max_tokens: int, source: str) -> int:
    """The tokens of source text a chunk may hold; CognitionError when the window leaves none."""
    fixed = prompt_tokens([{"role": "user", "content": extraction_prompt(source, [])}])
    budget = window - max_tokens - fixed - MARGIN
    if budget < 64:
        raise CognitionError(f"the context window ({window} tokens) minus the answer's {max_tokens} and the "
                             f"extraction prompt's {fixed} leaves no room for source text: "
                             "use --context-window with the model's real window")
    return budget


def _split(text: str, limit: int, bounds: tuple[re.Pattern[str], ...] = _BOUNDS) -> list[str]:
    """`text` cut into pieces of at most `limit` characters, at the coarsest bound that serves."""
    if len(text) <= limit:
        return [text]
    if not bounds:
        return [text[i:i + limit] for i in range(0, len(text), limit)]
    pieces: list[str] = []
    current = ""
    for part in bounds[0].split(text):
        joined = f"{current} {part}" if current else part
        if len(joined) <= limit:
            current = joined
            continue
        if current:
            pieces.append(current)
        if len(part) <= limit:
            current = part
        else:
            pieces.extend(_split(part, limit, bounds[1:]))
            current = ""
    if current:
        pieces.append(current)
    return pieces


def pack(units: list[Unit], budget: int) -> list[list[Unit]]:
    """The units in order, in chunks of at most `budget` tokens each (long units split)."""
    chunks: list[list[Unit]] = []
    current: list[Unit] = []
    used = 0
    for unit in units:
        room = budget - _tokens(unit_block(unit.locator, ""))
        for piece in _split(unit.text, max(1, room * 3 - 3)):
            cost = _tokens(unit_block(unit.locator, piece))
            if current and used + cost > budget:
                chunks.append(current)
                current, used = [], 0
            current.append(Unit(unit.locator, piece))
            used += cost
    if current:
        chunks.append(current)
    return chunks
