"""Per-model accounting (calls, tokens, LLM seconds, cost, improvements), counted from the nodes.

Each candidate is charged to the model that designed it (`node.model`): its research call and
whatever was asked of the LLM about it afterwards (analysis, repair, judge), as its node records.
The table is rebuilt from the node database on resume, like the run's other counters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evoforge.infra.config import ModelPrice
from evoforge.infra.llm.pricing import call_cost
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.population.pool import Pool


@dataclass
class ModelUsage:
    """What one model's candidates cost and brought."""

    calls: int = 0  # candidates it designed (research calls), failed ones included
    tokens_in: int = 0
    tokens_out: int = 0
    llm_s: float = 0.0
    improvements: int = 0  # candidates that beat their parent


def gain_over_parent(node: Node, parent: Node | None, pool: Pool) -> float | None:
    """How much better than its parent the node scored at the pool's stage (negative: worse), or
    None when either has no score there or the node was not accepted."""
    if node.status != EVALUATED or parent is None:
        return None
    mine, theirs = pool.value(node), pool.value(parent)
    if mine is None or theirs is None:
        return None
    return mine - theirs if pool.maximize else theirs - mine


class ModelUsageTable:
    """Per-model figures of the run, over every session (`status.json` `models`, MLflow)."""

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None) -> None:
        self.prices = dict(prices or {})
        self.by_model: dict[str, ModelUsage] = {}

    def add(self, node: Node, parent: Node | None, pool: Pool) -> float | None:
        """Count a finished candidate; returns its gain over its parent (None: not scored)."""
        gain = gain_over_parent(node, parent, pool)
        if node.origin == "seed":
            return gain
        usage = self.by_model.setdefault(node.model or "unknown", ModelUsage())
        usage.calls += 1
        usage.tokens_in += node.tokens_in
        usage.tokens_out += node.tokens_out
        usage.llm_s += node.llm_s
        usage.improvements += gain is not None and gain > 0
        return gain

    @classmethod
    def rebuild(cls, nodes: Sequence[Node], pool: Pool, prices: Mapping[str, ModelPrice] | None = None,
                observe: Callable[[str, float | None], None] | None = None) -> ModelUsageTable:
        """The table of a resumed run, from its finished nodes; `observe` (the LLM backend's) is
        given each candidate's model and gain again, as the commit gave them, so a bandit router
        resumes with what it had learnt."""
        table, by_id = cls(prices), {n.id: n for n in nodes}
        for node in sorted(nodes, key=lambda n: n.evaluated_at or n.created_at):
            if node.status.terminal:
                gain = table.add(node, by_id.get(node.parent_id or ""), pool)
                if observe is not None and node.origin != "seed":
                    observe(node.model, gain)
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
