"""What the staleness policy keeps on a node: how many pool versions old it was when it reached
evaluation, and the notes on what became of it (the policy's decision, reflection's verdict, a
speculative rollback and what it did to the node's descendants)."""

from __future__ import annotations

from dataclasses import dataclass

from evoforge.infra.node_data import NodeData


@dataclass
class StalenessData(NodeData, owner="staleness"):
    """A candidate's staleness and the notes on it, e.g. "guarded: dropped (staleness 3 > 2)"."""

    staleness: int = 0  # v - v_i when the item reached the engineer's door
    note: str = ""

    def add(self, note: str) -> None:
        """Append `note` to the notes (after a "; " when there are some)."""
        self.note = f"{self.note}; {note}" if self.note else note
