"""Scheduling policies of the stage engine: when a new item may be issued, and whether an item
leaving a stage goes on at once or waits for a barrier.

The *design* stages run from the entry stage up to the first stage that evaluates (e.g. learn →
research); the last of them (research, the LLM slots) is `engine.design`, the evaluating stage
after it `engine.downstream`. `AsyncPolicy` (the default) issues items while the budget allows,
the evaluation queue has room, and the items being designed are fewer than the evaluators can
absorb (Little's law, flows/demand.py). `BarrierPolicy` is the peers' generational mode on the
same engine: a generation as wide as the design stage's workers is issued only when nothing is
in flight, and its items wait after the design stage until the whole generation has left it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evoforge.flows.demand import ResearchDemand
from evoforge.stages.pipeline.stage import COMMIT
from evoforge.stages.population.item import Item

if TYPE_CHECKING:
    from evoforge.flows.engine import Engine


class Policy(ABC):
    """The engine's scheduling hooks."""

    @abstractmethod
    def may_issue(self, engine: Engine) -> bool:
        """Whether one more item may be drawn now."""

    def wants_workers(self, engine: Engine) -> bool:
        """Whether the design stage would take more items if it had more workers."""
        return False

    def on_issued(self, engine: Engine) -> None:
        """An item was drawn."""
        return None

    def hold(self, engine: Engine, stage: str, item: Item, dest: str) -> bool:
        """An item left `stage` for `dest`; True when the policy keeps it back for now."""
        return False

    def on_finished(self, engine: Engine, item: Item) -> None:
        """An item's trip ended at the commit."""
        return None

    def gauges(self, engine: Engine) -> dict[str, Any]:
        """What status.json shows of the policy."""
        return {}


@dataclass
class AsyncPolicy(Policy):
    """Demand-limited, barrier-free issuing (FlashEvolve's asynchronous pipeline)."""

    queue_size: int
    demand: ResearchDemand = field(default_factory=ResearchDemand)

    def research_target(self, engine: Engine) -> int:
        return self.demand.target(engine.design.workers, engine.downstream.workers)

    def may_issue(self, engine: Engine) -> bool:
        return (engine.budget.can_issue(len(engine.in_flight))
                and engine.downstream.waiting < self.queue_size
                and engine.designing() < self.research_target(engine))

    def wants_workers(self, engine: Engine) -> bool:
        design = engine.design
        return (engine.budget.can_issue(len(engine.in_flight))
                and engine.downstream.waiting < self.queue_size and design.busy >= design.workers
                and self.demand.target(design.bounds.high, engine.downstream.workers) > design.workers)

    def hold(self, engine: Engine, stage: str, item: Item, dest: str) -> bool:
        if stage == engine.design.name and item.node is not None and dest != COMMIT:
            self.demand.llm_s.add(item.node.llm_s)
        return False

    def on_finished(self, engine: Engine, item: Item) -> None:
        if item.node is not None and item.node.was_evaluated:
            self.demand.eval_s.add(item.node.eval_s)

    def gauges(self, engine: Engine) -> dict[str, Any]:
        return {"research_target": self.research_target(engine)}


@dataclass
class BarrierPolicy(Policy):
    """Generations in lockstep (sync mode): the whole generation passes each design stage before
    any item goes on, released in the order the items were issued, and the next generation
    starts when the commit has the last item of this one. Lockstep keeps a seeded run
    reproducible even when a stage finishes its items in a varying order."""

    generation: int = 0
    size: int = 0  # items in the current generation
    issued: int = 0
    left: dict[str, int] = field(default_factory=dict)  # per design stage: items through it
    held: dict[str, list[tuple[Item, str]]] = field(default_factory=dict)

    def may_issue(self, engine: Engine) -> bool:
        if self.issued < self.size:
            return True
        if engine.in_flight:  # the generation (or the resumed items) is not done yet
            return False
        width = min(engine.design.bounds.initial, engine.budget.remaining(0))
        if width <= 0:
            return False
        self.generation += 1
        self.size, self.issued, self.left, self.held = width, 0, {}, {}
        return True

    def on_issued(self, engine: Engine) -> None:
        self.issued += 1

    def hold(self, engine: Engine, stage: str, item: Item, dest: str) -> bool:
        names = [p.name for p in engine.design_path]
        if stage not in names:
            return False
        # an item that ends its trip in a design stage leaves every later one too
        for passed in names[names.index(stage):] if dest == COMMIT else [stage]:
            self.left[passed] = self.left.get(passed, 0) + 1
        if dest != COMMIT:
            self.held.setdefault(stage, []).append((item, dest))
        for name in names:  # release every stage the whole generation has passed
            if self.left.get(name, 0) >= self.size and self.held.get(name):
                order = list(engine.in_flight.values())
                released = sorted(self.held.pop(name), key=lambda held: order.index(held[0]))
                for waiting, to in released:
                    engine.send(waiting, to, from_stage=None)
        return dest != COMMIT

    def gauges(self, engine: Engine) -> dict[str, Any]:
        phase = "research" if self.left.get(engine.design.name, 0) < self.size else "evaluate"
        return {"generation": self.generation, "phase": phase}
