"""Knowledge: a cognition item as the researcher is shown it, with its retrieval score."""

from __future__ import annotations

from dataclasses import dataclass

SEED_PROVENANCE = "human seed"  # how seeded items' provenance starts; analyzer lessons say otherwise


@dataclass(frozen=True)
class Knowledge:
    """A cognition item shown to the researcher, with its retrieval score."""

    id: str
    title: str
    text: str
    provenance: str
    score: float

    @property
    def from_seed(self) -> bool:
        """A human prior (seeded), as opposed to a lesson the Analyzer wrote back."""
        return self.provenance.startswith(SEED_PROVENANCE)
