"""What a promotion round keeps on a node: which round evaluated it at the `full` level."""

from __future__ import annotations

from dataclasses import dataclass

from evoforge.infra.node_data import NodeData


@dataclass
class PromotionData(NodeData, owner="promotion"):
    """The promotion round that evaluated the candidate at `full` (None: never promoted)."""

    round: int | None = None
