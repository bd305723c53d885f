"""The unit of work that travels between stages, with fields grouped by the stage that fills them."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.infra.nodes import Node

# Terminal outcomes of an item.
ACCEPTED = "accepted"  # evaluated and committed
FAILED_RESEARCH = "failed_research"  # the LLM answer could not be used
FAILED_EVALUATION = "failed_evaluation"  # the candidate failed its checks or its evaluation
REJECTED_DUPLICATE = "rejected_duplicate"  # same program as one already in the run
OUTCOMES = (ACCEPTED, FAILED_RESEARCH, FAILED_EVALUATION, REJECTED_DUPLICATE)


@dataclass
class Item:
    """A candidate on its way through sample → research → engineer → commit."""

    # sample
    v_i: int  # pool version the item was designed against
    parent: Node
    inspirations: list[Node] = field(default_factory=list)
    answer_format: str = "diff"
    # research
    node: Node | None = None  # the candidate being built (its id is fixed once research starts)
    prompt: list[dict[str, str]] = field(default_factory=list)
    answer: str = ""
    # terminal
    outcome: str | None = None
    resumed: bool = False  # re-queued from the node database after a restart

    def staleness(self, v: int) -> int:
        """How many pool versions have passed since the item was designed."""
        return v - self.v_i
