"""What the repeat memo keeps on a node it served: the node whose evaluation it repeats."""

from __future__ import annotations

from dataclasses import dataclass

from evoforge.infra.node_data import NodeData


@dataclass
class RepeatData(NodeData, owner="repeats"):
    """The node whose evaluation a repeated program was served (it was not evaluated itself)."""

    repeat_of: str | None = None
