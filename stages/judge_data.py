"""What the judge stage keeps on a node: the LLM judge's score, apart from the task score."""

from __future__ import annotations

from dataclasses import dataclass

from evoforge.infra.node_data import NodeData


@dataclass
class JudgeData(NodeData, owner="judge"):
    """The LLM judge's score of a candidate in [0, 1] (its N/10); None when it gave none."""

    score: float | None = None
