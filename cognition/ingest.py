"""Documents in, pending cognition items out: read, chunk to the window, extract, check, dedupe, store."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from evoforge.cognition.documents import Reading
from evoforge.cognition.documents.chunks import chunk_budget, pack
from evoforge.cognition.entries import PENDING, CognitionItem
from evoforge.cognition.extraction import Checked, Tally, extract_chunk
from evoforge.cognition.store import CognitionBase
from evoforge.infra.llm.types import LLMBackend


@dataclass
class IngestReport:
    """What an ingestion read, asked, proposed, dropped and added (the added items' ids)."""

    files: int = 0
    skipped: int = 0
    pages: int = 0
    units: int = 0
    chunks: int = 0
    llm_calls: int = 0
    proposed: int = 0
    incomplete: int = 0
    quote_not_found: int = 0
    malformed_answers: int = 0
    duplicates: int = 0
    pending_added: int = 0
    window: int = 0
    failures: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """The report as JSON-ready data."""
        return asdict(self)


@dataclass(frozen=True)
class Extraction:
    """How to ask: the model's context window, the answer's room, the temperature."""

    window: int
    max_tokens: int
    temperature: float


def item_of(checked: Checked, source: Path, task: str | None, person: str) -> CognitionItem:
    """The pending item a checked proposal becomes, with its provenance."""
    proposal = checked.proposal
    idea = proposal.idea or proposal.title
    text = f"{idea}\nApplies: {proposal.applies}" if proposal.applies else idea
    title = proposal.title or " ".join(idea.split()[:8])
    return CognitionItem.create(
        title, text, source=str(source), task=task, status=PENDING, quote=proposal.quote,
        locator=checked.locator, person=person,
        provenance=f"ingested from {source}, {checked.locator} by {checked.model}")


async def ingest(reading: Reading, llm: LLMBackend, base: CognitionBase, how: Extraction, *,
                 task: str | None, person: str, max_similarity: float) -> IngestReport:
    """Extract the documents' items chunk by chunk and add the novel ones as pending."""
    report = IngestReport(files=len(reading.documents), skipped=len(reading.skipped), pages=reading.pages,
                          units=reading.units, window=how.window)
    items: list[CognitionItem] = []
    for document in reading.documents:
        tally = Tally()
        chunks = pack(document.units, chunk_budget(how.window, how.max_tokens, str(document.path)))
        report.chunks += len(chunks)
        for number, chunk in enumerate(chunks, start=1):
            await extract_chunk(llm, str(document.path), chunk, number, tally,
                                temperature=how.temperature, max_tokens=how.max_tokens)
        for name in ("llm_calls", "proposed", "incomplete", "quote_not_found", "malformed_answers"):
            setattr(report, name, getattr(report, name) + getattr(tally, name))
        report.failures += tally.failures
        items += [item_of(checked, document.path, task, person) for checked in tally.checked]
    added = base.add_novel(items, max_similarity)
    report.pending_added, report.added = len(added), [item.id for item in added]
    report.duplicates = len(items) - len(added)
    return report
