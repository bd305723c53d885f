"""Knowledge: a cognition item as the researcher is shown it, with its retrieval score, and how
far it can be trusted (a person's prior, a confirmed lesson, or a lesson nobody checked)."""

from __future__ import annotations

from dataclasses import dataclass

from evoforge.cognition.entries import CONFIRMED, CognitionItem

SEED_PROVENANCE = "human seed"  # how seeded items' provenance starts; analyzer lessons say otherwise
INGESTED_PROVENANCE = "ingested from"  # items extracted from a document (a person accepted them)


@dataclass(frozen=True)
class Knowledge:
    """A cognition item shown to the researcher, with its retrieval score."""

    id: str
    title: str
    text: str
    provenance: str
    score: float
    verdict: str = ""  # a lesson's claim, tested (cognition/entries.py VERDICTS)

    @classmethod
    def of(cls, item: CognitionItem, score: float) -> Knowledge:
        """The item as shown, its score rounded."""
        return cls(item.id, item.title, item.text, item.provenance, round(float(score), 4), item.verdict)

    @property
    def from_seed(self) -> bool:
        """A human prior (seeded, or extracted from a document and accepted by a person), as
        opposed to a lesson the Analyzer wrote back."""
        return self.provenance.startswith((SEED_PROVENANCE, INGESTED_PROVENANCE))

    @property
    def trusted(self) -> bool:
        """A human prior or a lesson whose claim a counterfactual run confirmed."""
        return self.from_seed or self.verdict == CONFIRMED

    @property
    def kind(self) -> str:
        """What the researcher is told it is."""
        if self.provenance.startswith(INGESTED_PROVENANCE):
            return "human prior, from a document"
        if self.from_seed:
            return "human prior"
        if self.verdict == CONFIRMED:
            return "lesson learned in earlier experiments, confirmed by a counterfactual run"
        return "lesson learned in earlier experiments, not confirmed"


def trust_order(found: list[Knowledge], k: int) -> list[Knowledge]:
    """The `k` to show: the `k` most similar, except that in the places lessons hold there,
    confirmed lessons come before unconfirmed ones (a confirmed lesson further down takes the place
    of an unconfirmed one); human priors keep their places.

    >>> prior = Knowledge("p", "P", "x", "human seed: a.md", 0.95)
    >>> loose = Knowledge("a", "A", "x", "analyzer insight", 0.9, "unchecked")
    >>> sure = Knowledge("b", "B", "y", "analyzer insight", 0.5, "confirmed")
    >>> [shown.id for shown in trust_order([loose, sure, prior], 2)]
    ['p', 'b']
    >>> [shown.id for shown in trust_order([loose, sure, prior], 3)]
    ['p', 'b', 'a']
    """
    by_score = sorted(found, key=lambda shown: -shown.score)
    lessons = iter(sorted((shown for shown in by_score if not shown.from_seed),
                          key=lambda shown: (shown.verdict != CONFIRMED, -shown.score)))
    return [shown if shown.from_seed else next(lessons) for shown in by_score[:k]]
