"""What the research plan keeps on a node: the plan branch (slot) it was designed under."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evoforge.infra.node_data import NodeData


@dataclass
class PlanData(NodeData, owner="plan"):
    """The research branch of the plan a candidate was drawn for (None: drawn outside the plan)."""

    branch: str | None = None


def node_branch(node: Any) -> str | None:
    """The plan branch of `node` (None when it has none)."""
    return PlanData.peek(node).branch
