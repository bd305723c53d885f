"""Scheduling policies of the stage engine: when a new item may be issued, and whether an item
leaving a stage goes on at once or waits for a barrier.

`AsyncPolicy` (the default) issues items while the budget allows, the entry stage's downstream
queue has room, and the research in flight is below what the evaluators can absorb (Little's
law, flows/demand.py). `BarrierPolicy` is the peers' generational mode on the same engine: a
generation as wide as the entry stage's workers (the LLM slots) is issued only when nothing is
in flight, and its items wait after the entry stage until the whole generation has left it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evoforge.flows.demand import ResearchDemand
from evoforge.stages.item import Item
from evoforge.stages.stage import COMMIT

if TYPE_CHECKING:
    from evoforge.flows.engine import Engine


class Policy(ABC):
    """The engine's scheduling hooks."""

    @abstractmethod
    def may_issue(self, engine: Engine) -> bool:
        """Whether the entry stage may draw one more item now."""

    def wants_workers(self, engine: Engine) -> bool:
        """Whether the entry stage would issue more items if it had more workers."""
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
        return self.demand.target(engine.entry.workers, engine.downstream.workers)

    def may_issue(self, engine: Engine) -> bool:
        return (engine.budget.can_issue(len(engine.in_flight))
                and engine.downstream.waiting < self.queue_size
                and engine.entry.busy < self.research_target(engine))

    def wants_workers(self, engine: Engine) -> bool:
        entry = engine.entry
        return (engine.budget.can_issue(len(engine.in_flight))
                and engine.downstream.waiting < self.queue_size and entry.busy >= entry.workers
                and self.demand.target(entry.bounds.high, engine.downstream.workers) > entry.workers)

    def hold(self, engine: Engine, stage: str, item: Item, dest: str) -> bool:
        if stage == engine.entry.name and item.node is not None and dest != COMMIT:
            self.demand.llm_s.add(item.node.llm_s)
        return False

    def on_finished(self, engine: Engine, item: Item) -> None:
        if item.node is not None and item.node.was_evaluated:
            self.demand.eval_s.add(item.node.eval_s)

    def gauges(self, engine: Engine) -> dict[str, Any]:
        return {"research_target": self.research_target(engine)}


@dataclass
class BarrierPolicy(Policy):
    """Generations with a barrier after the entry stage and after the commit (sync mode)."""

    generation: int = 0
    size: int = 0  # items in the current generation
    issued: int = 0
    left_entry: int = 0
    held: list[tuple[Item, str]] = field(default_factory=list)

    def may_issue(self, engine: Engine) -> bool:
        if self.issued < self.size:
            return True
        if engine.in_flight:  # the generation (or the resumed items) is not done yet
            return False
        width = min(engine.entry.bounds.initial, engine.budget.remaining(0))
        if width <= 0:
            return False
        self.generation += 1
        self.size, self.issued, self.left_entry = width, 0, 0
        return True

    def on_issued(self, engine: Engine) -> None:
        self.issued += 1

    def hold(self, engine: Engine, stage: str, item: Item, dest: str) -> bool:
        if stage != engine.entry.name:
            return False
        self.left_entry += 1
        if dest != COMMIT:
            self.held.append((item, dest))
        if self.left_entry >= self.size:  # the whole generation is through: release it
            released, self.held = self.held, []
            for waiting, to in released:
                engine.send(waiting, to, from_stage=None)
        return dest != COMMIT

    def gauges(self, engine: Engine) -> dict[str, Any]:
        phase = "research" if self.left_entry < self.size else "evaluate"
        return {"generation": self.generation, "phase": phase}
