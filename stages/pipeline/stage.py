"""The stage contract: what a stage plug-in declares, and what it hands back to the engine.

A stage is one module holding one `Stage` subclass: its name, its worker bounds, an async
`run(item, ctx) -> StageResult`, and where its results go. The engine (flows/engine.py) gives
each stage a `StagePool` (bounded queue, worker cap, meters) and knows nothing else about it. A
stage never changes shared state: it works on a private copy of the item's node
(`item.node.copy()`) and returns it; only the commit coroutine applies results to the pool,
the sampler, the database, the run files and MLflow. A new stage is a new file::

    class Analyze(Stage):
        name, after = "analyze", "engineer"          # runs on what the engineer hands on
        task_run_name = "analyze-{label}"            # one Prefect task run per item

        async def run(self, item, ctx):
            node = item.node.copy(analysis="...")
            return StageResult(node)                 # then on where the engineer's output went

and a line in the run's stage list (`stages/pipeline/registry.py`), or `extra_stages=` of the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import Node

if TYPE_CHECKING:
    from evoforge.stages.pipeline.context import StageContext
    from evoforge.stages.population.item import Item

COMMIT = "commit"  # the destination that ends an item's trip: the single writer applies it


@dataclass(frozen=True)
class WorkerBounds:
    """How many workers a stage starts with, and the range adaptive control may move it in."""

    initial: int
    low: int = 1
    high: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.initial <= max(self.high, self.initial):
            raise ValueError(f"worker bounds out of order: {self}")

    @classmethod
    def configured(cls, initial: int, cfg: RunConfig, most: int) -> WorkerBounds:
        """`initial` workers, fixed; with adaptive control on, between its minimum and `most`."""
        if not cfg.adaptive.enabled:
            return cls(initial, min(cfg.adaptive.min_workers, initial), initial)
        return cls(initial, min(cfg.adaptive.min_workers, initial), max(most, initial))


@dataclass(frozen=True)
class StageResult:
    """What one stage run produced for one item.

    `node` is the stage's own copy of the candidate with what the stage filled in; `to` sends
    the item somewhere other than the stage's `next` (another stage, or `COMMIT`); `updates` are
    item fields the stage changed (e.g. reflection re-basing the item onto a new parent). A stage
    that ends an item's trip early (a failed LLM answer) says `to=COMMIT`.
    """

    node: Node
    to: str | None = None
    updates: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Admission:
    """A stage's verdict on an item at its door: pass it in, or send it elsewhere with a note."""

    to: str | None = None  # None: the item enters this stage
    node: Node | None = None  # the item's node with the decision recorded on it

    @property
    def admitted(self) -> bool:
        return self.to is None


class Stage(ABC):
    """One stage plug-in. Subclasses set `name` (and usually `then` or `after`) and implement `run`.

    `after` places the stage in the graph: items another stage hands on to `after` reach this
    stage instead, and this stage hands them on to where `after`'s output went (so a stage can
    be spliced in without editing the others). `checkpoint` asks the commit to persist an item
    leaving this stage before it goes on (so that a restart re-queues it). `task_run_name`
    makes each run a Prefect task run (None: the stage runs inline in the flow). `evaluates`
    marks the stage the scheduling policy feeds: the stages before it are the design stages.
    """

    name: ClassVar[str]
    then: ClassVar[str] = COMMIT  # where results go by default
    after: ClassVar[str | None] = None  # splice this stage in behind another one
    checkpoint: ClassVar[bool] = False
    task_run_name: ClassVar[str | None] = None  # e.g. "research-{label}"
    evaluates: ClassVar[bool] = False  # runs the evaluations (the stages before it design)

    def workers(self, cfg: RunConfig) -> WorkerBounds:
        """Worker bounds for this run; one worker by default."""
        return WorkerBounds(1, 1, 1)

    def enabled(self, cfg: RunConfig) -> bool:
        """Whether this run uses the stage at all (e.g. reflect only under the reflective policy)."""
        return True

    def skips(self, item: Item, ctx: StageContext) -> bool:
        """True when the stage has nothing to do for `item`: the engine routes it past the stage
        without queueing it or spending a task run (e.g. the Analyzer on a duplicate)."""
        return False

    def admit(self, item: Item, ctx: StageContext) -> Admission:
        """The entry policy, checked when a worker takes the item off the queue; default: admit."""
        return Admission()

    @abstractmethod
    async def run(self, item: Item, ctx: StageContext) -> StageResult:
        """Do the stage's work on `item` and say what came of it."""

    def __repr__(self) -> str:
        return f"<stage {self.name}>"
