"""One piece of prior knowledge in the cognition base, and the text hash that names it."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field


def normalise(text: str) -> str:
    """The text as compared for duplicates: lower case, whitespace collapsed."""
    return " ".join(text.lower().split())


def text_id(text: str) -> str:
    """The id of an item: a hash of its normalised text, so the same text is the same item."""
    return hashlib.sha256(normalise(text).encode()).hexdigest()[:16]


@dataclass
class CognitionItem:
    """A titled piece of knowledge with where it came from.

    >>> item = CognitionItem.create("Best fit", "Put each item where it leaves the least room.")
    >>> item.id == CognitionItem.create("other title", "put each item  where it leaves the least room.").id
    True
    """

    id: str
    title: str
    text: str
    source: str = ""
    tags: list[str] = field(default_factory=list)
    task: str | None = None  # None: useful for every task
    provenance: str = ""  # e.g. "human seed: priors.md", "analyzer insight of node X in run Y"
    created_at: float = 0.0

    @classmethod
    def create(
        cls,
        title: str,
        text: str,
        *,
        source: str = "",
        tags: list[str] | None = None,
        task: str | None = None,
        provenance: str = "",
        created_at: float | None = None,
    ) -> CognitionItem:
        """A new item whose id is the hash of its text and whose time is now unless given."""
        return cls(
            id=text_id(text),
            title=title,
            text=text,
            source=source,
            tags=list(tags or []),
            task=task,
            provenance=provenance,
            created_at=time.time() if created_at is None else created_at,
        )

    def embedding_text(self) -> str:
        """What is embedded: the title, then the text."""
        return f"{self.title}\n{self.text}" if self.title else self.text
