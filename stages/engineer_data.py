"""What the engineer stage keeps on a node with knobs: the score of its structure with the
declared defaults, and the values it hard-codes that its parent's knob space owned."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.infra.node_data import NodeData


@dataclass
class EngineerData(NodeData, owner="engineer"):
    """The defaults' evaluation of a candidate's structure and its hard-coded knob values."""

    score_default: float | None = None  # the structure with its declared defaults, at the search level
    hardcoded: list[str] = field(default_factory=list)  # values hard-coded that the space should own
