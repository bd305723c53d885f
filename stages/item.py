"""The unit of work that travels between stages, with fields grouped by the stage that fills them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evoforge.infra.nodes import Node

if TYPE_CHECKING:
    from evoforge.stages.sample.inspirations import Inspiration

# Terminal outcomes of an item.
ACCEPTED = "accepted"  # evaluated and committed
FAILED_RESEARCH = "failed_research"  # the LLM answer could not be used
FAILED_EVALUATION = "failed_evaluation"  # the candidate failed its checks or its evaluation
REJECTED_DUPLICATE = "rejected_duplicate"  # same program as one already in the run
DROPPED_STALE = "dropped_stale"  # the staleness policy (or the reflection) dropped it
PRUNED_EARLY = "pruned_early"  # its validation prefix could not beat the pool
ROLLED_BACK_SPEC = "rolled_back"  # entered the pool speculatively, the full evaluation disagreed
OUTCOMES = (ACCEPTED, FAILED_RESEARCH, FAILED_EVALUATION, REJECTED_DUPLICATE, DROPPED_STALE,
            PRUNED_EARLY, ROLLED_BACK_SPEC)


@dataclass
class Item:
    """A candidate on its way through sample → research → engineer → commit."""

    # sample
    v_i: int  # pool version the item was designed against
    parent: Node
    inspirations: list[Inspiration] = field(default_factory=list)  # labelled best/diverse/recent
    answer_format: str = "diff"
    # research
    node: Node | None = None  # the candidate being built (its id is fixed once research starts)
    prompt: list[dict[str, str]] = field(default_factory=list)
    answer: str = ""
    # staleness and speculation
    tainted_by: str | None = None  # a rolled-back speculative node this item was derived from
    reflected: bool = False
    # terminal
    outcome: str | None = None

    def staleness(self, v: int) -> int:
        """How many pool versions have passed since the item was designed."""
        return v - self.v_i
