"""A document as read for extraction: its units of text, each with where it sits in the document."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Unit:
    """A run of a document's text and where it is ("page 3, §2.1 Rules", "§ Install", "lines 10-42")."""

    locator: str
    text: str


@dataclass
class Document:
    """A file's units in reading order, and its page count (0 for a document without pages)."""

    path: Path
    units: list[Unit] = field(default_factory=list)
    pages: int = 0


@dataclass
class Reading:
    """The documents read from the paths given, and the files skipped (not a known document type)."""

    documents: list[Document] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)

    @property
    def pages(self) -> int:
        """Pages read over all the documents (PDF pages; other documents count none)."""
        return sum(doc.pages for doc in self.documents)

    @property
    def units(self) -> int:
        """Units read over all the documents."""
        return sum(len(doc.units) for doc in self.documents)
