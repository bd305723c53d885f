"""Candidate items from a chunk of source text by an LLM, each quote checked against the text."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.cognition.documents import Unit
from evoforge.cognition.entries import normalise
from evoforge.infra.extraction_format import Proposal, extraction_prompt, parse_proposals
from evoforge.infra.llm.types import LLMBackend, LLMError, cut_answers_kept


@dataclass(frozen=True)
class Checked:
    """A proposal whose quote is in the chunk, located at the unit that holds it."""

    proposal: Proposal
    locator: str
    model: str


@dataclass
class Tally:
    """What the extraction of a document's chunks gave: calls, proposals and why some were dropped."""

    llm_calls: int = 0
    proposed: int = 0
    incomplete: int = 0  # no quote (or one under MIN_QUOTE_WORDS words), or neither title nor idea
    quote_not_found: int = 0
    malformed_answers: int = 0  # an answer holding no item and not saying "none"
    failures: list[str] = field(default_factory=list)  # "<file> chunk N: why"
    checked: list[Checked] = field(default_factory=list)


MIN_QUOTE_WORDS = 4  # a shorter "quote" (a word or two) is found in any text and proves nothing


def _bare(text: str) -> str:
    return normalise(text).strip(" .…\"'“”").removesuffix("...").strip()


def quote_locator(quote: str, chunk: list[Unit]) -> str | None:
    """The locator of the unit holding `quote` (whitespace and case aside), the chunk's first
    unit's when the quote spans units, None when the chunk does not hold it."""
    wanted = _bare(quote)
    if not wanted:
        return None
    for unit in chunk:
        if wanted in normalise(unit.text):
            return unit.locator
    joined = normalise(" ".join(unit.text for unit in chunk))
    return chunk[0].locator if wanted in joined else None


async def extract_chunk(llm: LLMBackend, source: str, chunk: list[Unit], number: int, tally: Tally, *,
                        temperature: float, max_tokens: int) -> None:
    """Ask for the chunk's items and add the checked ones (and the counts) to `tally`; an LLM
    error is counted under the chunk, never raised; an answer cut off at max_tokens is parsed as it is."""
    prompt = extraction_prompt(source, [(unit.locator, unit.text) for unit in chunk])
    tally.llm_calls += 1
    try:
        with cut_answers_kept():  # an answer cut off at max_tokens still holds its complete items
            answer = await llm.complete([{"role": "user", "content": prompt}], temperature=temperature,
                                        max_tokens=max_tokens)
    except LLMError as exc:
        tally.failures.append(f"{source} chunk {number}: {exc}")
        return
    proposals = parse_proposals(answer.text)
    if not proposals and normalise(answer.text).strip(" .\"'*") not in ("none", "no items"):
        tally.malformed_answers += 1
        tally.failures.append(f"{source} chunk {number}: an answer with no item in the asked format")
        return
    for proposal in proposals:
        tally.proposed += 1
        if len(proposal.quote.split()) < MIN_QUOTE_WORDS or not (proposal.title or proposal.idea):
            tally.incomplete += 1
            continue
        locator = quote_locator(proposal.quote, chunk)
        if locator is None:
            tally.quote_not_found += 1
            continue
        tally.checked.append(Checked(proposal, locator, answer.model))
