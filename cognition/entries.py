"""One piece of prior knowledge in the cognition base, and the text hash that names it.

An item has a review status (an ingested item waits as PENDING until a person accepts it; only
ACCEPTED items are retrieved) and, for a lesson of the Analyzer, the verdict of the claim behind it
(a counterfactual run CONFIRMED or REFUTED it, or it was left UNCHECKED or INCONCLUSIVE; "" for
items that rest on no claim: seeds, ingested documents).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

PENDING, ACCEPTED, REJECTED = "pending", "accepted", "rejected"
STATUSES = (PENDING, ACCEPTED, REJECTED)
CONFIRMED, REFUTED, INCONCLUSIVE, UNCHECKED = "confirmed", "refuted", "inconclusive", "unchecked"
VERDICTS = ("", CONFIRMED, REFUTED, INCONCLUSIVE, UNCHECKED)


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
    status: str = ACCEPTED  # PENDING until reviewed (ingested items); only ACCEPTED ones are retrieved
    verdict: str = ""  # a lesson's claim, tested: CONFIRMED, REFUTED, INCONCLUSIVE, UNCHECKED
    quote: str = ""  # the exact words of the source it was extracted from (ingested items)
    locator: str = ""  # where in the source: "page 3, §2.1 Rules", "lines 10-42"
    run_id: str = ""  # the run that wrote it (lessons)
    person: str = ""  # who added, ingested or ran it

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
        status: str = ACCEPTED,
        verdict: str = "",
        quote: str = "",
        locator: str = "",
        run_id: str = "",
        person: str = "",
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
            status=status,
            verdict=verdict,
            quote=quote,
            locator=locator,
            run_id=run_id,
            person=person,
        )

    @property
    def retrievable(self) -> bool:
        """Whether a run may be shown it: accepted, and not resting on a refuted claim."""
        return self.status == ACCEPTED and self.verdict != REFUTED

    def embedding_text(self) -> str:
        """What is embedded: the title, then the text."""
        return f"{self.title}\n{self.text}" if self.title else self.text
