"""The unit of work that travels between stages, with fields grouped by the stage that fills them.

Only the engine (the head) changes an item: a stage reads it and returns a `StageResult`, which
the engine applies (`apply`). The item's status is its node's: one vocabulary (`Status`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evoforge.infra.nodes import Node, Status

if TYPE_CHECKING:
    from evoforge.cognition.knowledge import Knowledge
    from evoforge.infra.llm_traces import LLMCall
    from evoforge.stages.sample.inspirations import Inspiration
    from evoforge.stages.tuning.param_study import StudyResult


@dataclass
class Item:
    """A candidate on its way through sample → learn → research → engineer → analyze → commit."""

    # sample
    v_i: int  # pool version the item was designed against
    parent: Node
    inspirations: list[Inspiration] = field(default_factory=list)  # labelled best/diverse/recent
    answer_format: str = "diff"
    branch: str | None = None  # the plan branch it researches (None: no plan)
    # learn
    knowledge: list[Knowledge] = field(default_factory=list)  # cognition items for the prompt
    # research
    node: Node | None = None  # the candidate being built (its id is fixed once research starts)
    prompt: list[dict[str, str]] = field(default_factory=list)
    answer: str = ""
    # param_search
    study: StudyResult | None = None  # the Optuna study of its knobs (written to param_trials/)
    # every stage that asks the LLM (the engine collects the calls; the commit traces them in MLflow)
    llm_calls: list[LLMCall] = field(default_factory=list)
    # staleness and speculation (the head sets tainted_by when an ancestor is rolled back)
    tainted_by: str | None = None  # a rolled-back speculative node this item was derived from
    reflected: bool = False

    @property
    def status(self) -> Status | None:
        """The candidate's status (None before research created its node)."""
        return self.node.status if self.node is not None else None

    @property
    def label(self) -> str:
        """How task runs and logs name the item: its node id, or the parent it came from."""
        return self.node.id if self.node is not None else f"from-{self.parent.id}"

    def staleness(self, v: int) -> int:
        """How many pool versions have passed since the item was designed."""
        return v - self.v_i

    def apply(self, node: Node | None, updates: Mapping[str, Any]) -> None:
        """Take a stage's result: its copy of the node and the item fields it changed."""
        for name, value in updates.items():
            if name not in _STAGE_FIELDS:
                raise ValueError(f"a stage may not set item field '{name}'")
            setattr(self, name, value)
        if node is not None:
            self.node = node


_STAGE_FIELDS = frozenset({"v_i", "parent", "branch", "inspirations", "answer_format", "knowledge", "prompt",
                           "answer", "study", "llm_calls", "tainted_by", "reflected"})
