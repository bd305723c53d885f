"""Per-model accounting (calls, tokens, LLM seconds, cost, improvements), counted from the nodes.

Each candidate is charged to the model that designed it (`node.model`): its research call and
whatever was asked of the LLM about it afterwards (analysis, repair, judge), as its node records.
The table is rebuilt from the node database on resume, like the run's other counters.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evoforge.infra.config import ModelPrice
from evoforge.infra.llm.pricing import call_cost
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.sinks.base import Event, EventKind, Sink


@dataclass
class ModelUsage:
    """What one model's candidates cost and brought."""

    calls: int = 0  # candidates it designed (research calls), failed ones included
    tokens_in: int = 0
    tokens_out: int = 0
    llm_s: float = 0.0
    improvements: int = 0  # candidates that beat their parent


def gain_over_parent(node: Node, parent: Node | None, level: str, maximize: bool) -> float | None:
    """How much better than its parent the node scored at the search level (negative: worse), or
    None when either has no score there or the node was not accepted.

    >>> a, b = Node(id="a", run_id="r", code=""), Node(id="b", run_id="r", code="", parent_id="a")
    >>> a.score_full, b.score_full, b.status = 2.0, 1.5, EVALUATED
    >>> gain_over_parent(b, a, "full", maximize=False)
    0.5
    """
    if node.status != EVALUATED or parent is None:
        return None
    mine, theirs = node.score(level), parent.score(level)
    if mine is None or theirs is None:
        return None
    return mine - theirs if maximize else theirs - mine


class ModelUsageTable:
    """Per-model figures of the run, over every session (`status.json` `models`, MLflow)."""

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None) -> None:
        self.prices = dict(prices or {})
        self.by_model: dict[str, ModelUsage] = {}

    def count(self, node: Node, gain: float | None) -> None:
        """Count a finished candidate with its gain over its parent (None: not scored)."""
        if node.origin == "seed":
            return
        usage = self.by_model.setdefault(node.model or "unknown", ModelUsage())
        usage.calls += 1
        usage.tokens_in += node.tokens_in
        usage.tokens_out += node.tokens_out
        usage.llm_s += node.llm_s
        usage.improvements += gain is not None and gain > 0

    @classmethod
    def rebuild(cls, nodes: Sequence[Node], level: str, maximize: bool,
                prices: Mapping[str, ModelPrice] | None = None) -> ModelUsageTable:
        """The table of a resumed run, from its finished nodes."""
        table = cls(prices)
        for node, gain in gains(nodes, level, maximize):
            table.count(node, gain)
        return table

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """{model: {calls, tokens_in, tokens_out, llm_s, llm_s_per_candidate, cost_usd, improvements}};
        cost_usd is None for a model the price table does not name."""
        out: dict[str, dict[str, Any]] = {}
        for model, usage in sorted(self.by_model.items()):
            row: dict[str, Any] = asdict(usage)
            row["llm_s"] = round(usage.llm_s, 3)
            row["llm_s_per_candidate"] = round(usage.llm_s / usage.calls, 3) if usage.calls else 0.0
            cost = call_cost(self.prices, model, usage.tokens_in, usage.tokens_out)
            row["cost_usd"] = None if cost is None else round(cost, 6)
            out[model] = row
        return out


def gains(nodes: Sequence[Node], level: str, maximize: bool) -> list[tuple[Node, float | None]]:
    """Each finished node with its gain over its parent, in the order they finished (a resumed
    run's accounting, and what a bandit router is told again so it resumes with what it learnt)."""
    by_id = {n.id: n for n in nodes}
    return [(node, gain_over_parent(node, by_id.get(node.parent_id or ""), level, maximize))
            for node in sorted(nodes, key=lambda n: n.evaluated_at or n.created_at) if node.status.terminal]


_METRIC_UNSAFE = re.compile(r"[^\w.\- /]")


def model_metrics(models: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The per-model figures as MLflow metrics, `model.<name>.<figure>` (unpriced cost left out).

    >>> model_metrics({"gpt-4o:mini": {"calls": 2, "cost_usd": None}})
    {'model.gpt-4o_mini.calls': 2.0}
    """
    metrics: dict[str, float] = {}
    for model, row in models.items():
        name = _METRIC_UNSAFE.sub("_", model)
        for key, value in row.items():
            if isinstance(value, (int, float)):
                metrics[f"model.{name}.{key}"] = float(value)
    return metrics


class ModelAccounting(Sink):
    """Per-model accounting as a sink: each finished candidate counted against its model (its
    gain over its parent comes on the event, as the head measured it); `as_dict` may be read from
    any thread (status.json)."""

    name = "accounting"
    interval_s = 0.5

    def __init__(self, level: str, maximize: bool, prices: Mapping[str, ModelPrice] | None = None) -> None:
        self.level, self.maximize = level, maximize
        self.table = ModelUsageTable(prices)
        self._lock = threading.Lock()

    def record(self, events: Sequence[Event]) -> None:
        with self._lock:
            for event in events:
                if event.kind == EventKind.FINISHED and event.node is not None:
                    self.table.count(event.node, event.gain)

    def rebuild(self, nodes: Sequence[Node]) -> None:
        with self._lock:
            self.table = ModelUsageTable.rebuild(nodes, self.level, self.maximize, self.table.prices)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return self.table.as_dict()
