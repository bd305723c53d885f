"""The stage contract: what a stage plug-in declares, and what it hands back to the engine.

A stage is one module holding one `Stage` subclass: its name, where it sits in the pipeline, how
many workers it runs, an async `run(item, ctx) -> StageResult` (`ctx`: the run's read-only view,
stages/pipeline/run_view.py), and optionally data of its own
on each node (a `NodeData` dataclass) and sinks that record it. The engine (flows/engine.py)
gives each stage a `StagePool` (queue, workers, meters) and knows nothing else about it. A stage
never changes shared state: it works on a private copy of the item's node (`item.node.copy()`)
and returns it; only the head applies results to the run. A new stage is a new file (docs/extend/stage.md,
"Write a stage"), loaded with `--plugin FILE` (or `engine.plugins`), placed behind the stage
it names in `after`:

    class Tally(Stage):
        name, after = "tally", "engineer"            # runs on what the engineer hands on

        async def run(self, item, ctx):
            node = item.node.copy()
            TallyData.of(node).seen += 1             # its own data, stored with the node
            return StageResult(node)                 # on to the stage after it
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from evoforge.infra.config import RunConfig
from evoforge.infra.node_data import NodeData
from evoforge.infra.nodes import Node

if TYPE_CHECKING:
    from evoforge.stages.pipeline.run_view import RunView
    from evoforge.stages.population.item import Item, ItemUpdate
    from evoforge.stages.sinks.base import Sink

COMMIT = "commit"  # the destination that ends an item's trip: the head applies it


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
    the item somewhere other than the next stage (another stage, or `COMMIT`); `updates` are the
    item fields the stage changed (e.g. reflection re-basing the item onto a new parent). A stage
    that ends an item's trip early (a failed LLM answer) says `to=COMMIT`.
    """

    node: Node
    to: str | None = None
    updates: ItemUpdate | None = None


@dataclass(frozen=True)
class Admission:
    """A stage's verdict on an item at its door: pass it in, or send it elsewhere with a note."""

    to: str | None = None  # None: the item enters this stage
    node: Node | None = None  # the item's node with the decision recorded on it

    @property
    def admitted(self) -> bool:
        return self.to is None


class Stage(ABC):
    """One stage plug-in. Subclasses set `name` and implement `run`.

    Where it sits: the algorithm lists the main line in order (stages/algorithms/); a plug-in
    names the stage it follows (`after`); a side stage, reached only when another stage sends an
    item to it, hands its results to `then`. `checkpoint` asks the head to persist an item leaving
    this stage (a restart sends it on from there). `task_run_name` makes each run a Prefect task
    run when `engine.task_runs: stages` (default: only evaluations are). `evaluates` marks the
    stage the scheduling policy feeds and whose workers are the run's evaluation slots.
    `runs_on_seed`: the task's initial program goes through this stage before the search starts.

    Workers: `engine.workers.<name>` when the config names the stage, else the count of the stage
    it follows for sizing (`workers_like`), else `default_workers`; adaptive control may move it
    up to `adaptive.max_workers.<name>` (or the like stage's, or `max_workers`).
    """

    name: ClassVar[str]
    then: ClassVar[str] = COMMIT  # side stages: where results go by default
    after: ClassVar[str | None] = None  # plug-ins: the stage this one follows
    checkpoint: ClassVar[bool] = False
    task_run_name: ClassVar[str | None] = None  # e.g. "research-{label}"
    evaluates: ClassVar[bool] = False  # runs the evaluations (the stages before it design)
    runs_on_seed: ClassVar[bool] = False  # the initial program passes through it first
    data: ClassVar[type[NodeData] | None] = None  # what it keeps on each node (listed by `evoforge stages`)
    default_workers: ClassVar[int] = 1
    workers_like: ClassVar[str | None] = None  # size it like this stage unless configured
    max_workers: ClassVar[int] = 1  # adaptive control's ceiling unless configured

    def workers(self, cfg: RunConfig) -> WorkerBounds:
        """Worker bounds for this run (see the class docstring)."""
        return WorkerBounds.configured(worker_count(self, cfg), cfg, worker_ceiling(self, cfg))

    def enabled(self, cfg: RunConfig) -> bool:
        """Whether this run uses the stage at all (e.g. reflect only under the reflective policy)."""
        return True

    def skips(self, item: Item, ctx: RunView) -> bool:
        """True when the stage has nothing to do for `item`: the engine routes it past the stage
        without queueing it or spending a task run (e.g. the Analyzer on a duplicate)."""
        return False

    def admit(self, item: Item, ctx: RunView) -> Admission:
        """The entry policy, checked when a worker takes the item off the queue; default: admit."""
        return Admission()

    def sinks(self, ctx: RunView) -> Sequence[Sink]:
        """Sinks this stage brings to record what it hands on (`Item.owned`, its node data)."""
        return ()

    @abstractmethod
    async def run(self, item: Item, ctx: RunView) -> StageResult:
        """Do the stage's work on `item` and say what came of it."""

    def __repr__(self) -> str:
        return f"<stage {self.name}>"


def worker_count(stage: Stage, cfg: RunConfig) -> int:
    """The stage's configured worker count (its own, the like stage's, or its default)."""
    return _setting(stage, cfg.engine.workers, stage.default_workers)


def worker_ceiling(stage: Stage, cfg: RunConfig) -> int:
    """The most workers adaptive control may give the stage (the same lookup)."""
    return _setting(stage, cfg.adaptive.max_workers, stage.max_workers)


def _setting(stage: Stage, by_name: dict[str, int], default: int) -> int:
    """`by_name`'s value for the stage, else for the stage it takes its workers like, else `default`."""
    for name in (stage.name, stage.workers_like):
        if name is not None and name in by_name:
            return by_name[name]
    return default
