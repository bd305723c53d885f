"""The unit of work that travels between stages, with fields grouped by the stage that fills them.

Only the engine (the head) changes an item: a stage reads it and returns a `StageResult`, which
the engine applies (`apply`). The item's status is its node's: one vocabulary (`Status`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from evoforge.infra.nodes import Node, Status

if TYPE_CHECKING:
    from evoforge.cognition.knowledge import Knowledge
    from evoforge.infra.llm_traces import LLMCall


@dataclass(frozen=True)
class Inspiration:
    """A node shown in the prompt, with why it was chosen (best / diverse / recent)."""

    node: Node
    label: str

    @property
    def id(self) -> str:
        return self.node.id


@dataclass
class Item:
    """A candidate on its way through the pipeline (sample -> learn -> research -> engineer -> ...)."""

    # sample
    v_i: int  # pool version the item was designed against
    parent: Node
    inspirations: list[Inspiration] = field(default_factory=list)  # labelled best/diverse/recent
    answer_format: str = "diff"
    branch: str | None = None  # the plan branch it researches (None: no plan)
    # learn
    knowledge: list[Knowledge] = field(default_factory=list)  # cognition items for the prompt
    # rollout (GEPA): what the proposer is shown of the parent's cases (None: its val feedback)
    feedback: str | None = None
    # research
    node: Node | None = None  # the candidate being built (its id is fixed once research starts)
    prompt: list[dict[str, str]] = field(default_factory=list)
    answer: str = ""
    # every stage that asks the LLM (the engine collects the calls; the MLflow sink traces them)
    llm_calls: list[LLMCall] = field(default_factory=list)
    # staleness and speculation (the engine sets tainted_by when an ancestor is rolled back)
    tainted_by: str | None = None  # a rolled-back speculative node this item was derived from
    reflected: bool = False
    # what a stage hands on to its own sink with the item's events (param search: its Optuna study)
    owned: dict[str, Any] = field(default_factory=dict)

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

    def apply(self, node: Node | None, update: ItemUpdate | None = None) -> None:
        """Take a stage's result: its copy of the node and the item fields it changed."""
        if update is not None:
            for f in fields(update):
                value = getattr(update, f.name)
                if value is KEEP:
                    continue
                if f.name == "owned":
                    self.owned = {**self.owned, **value}
                else:
                    setattr(self, f.name, value)
        if node is not None:
            self.node = node


class _Keep:
    """The value of an `ItemUpdate` field the stage leaves as it is."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


@dataclass(frozen=True)
class ItemUpdate:
    """The item fields a stage changed (every other field: `KEEP`); `owned` is merged into the
    item's, by stage name.

    >>> item = Item(v_i=0, parent=Node(id="p", run_id="r", code=""))
    >>> item.apply(None, ItemUpdate(answer="x", owned={"mine": 1}))
    >>> item.answer, item.owned, item.prompt
    ('x', {'mine': 1}, [])
    """

    v_i: int = KEEP
    parent: Node = KEEP
    inspirations: list[Inspiration] = KEEP
    answer_format: str = KEEP
    branch: str | None = KEEP
    knowledge: list[Knowledge] = KEEP
    feedback: str | None = KEEP
    prompt: list[dict[str, str]] = KEEP
    answer: str = KEEP
    llm_calls: list[LLMCall] = KEEP
    tainted_by: str | None = KEEP
    reflected: bool = KEEP
    owned: dict[str, Any] = KEEP
