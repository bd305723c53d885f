"""What the reflect stage keeps on a node: the decision it took on the stale candidate, as a typed
outcome the run's counters count, and the parent it was designed on when it was patched."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from evoforge.infra.node_data import NodeData


class ReflectOutcome(StrEnum):
    """What reflection did with a stale candidate."""

    KEPT = "kept"  # the LLM said keep: evaluated as it is
    UNDECIDED = "undecided"  # the answer named no decision: kept
    PATCHED = "patched"  # its idea re-applied to the pool's best program
    UNUSABLE_PATCH = "unusable_patch"  # the LLM said patch but the patch did not apply: kept
    DROPPED = "dropped"  # the LLM said drop: it went stale
    CALL_FAILED = "call_failed"  # the reflection call failed: kept, no decision was taken

    @property
    def decided(self) -> bool:
        """True when the LLM answered the reflection (every outcome but a failed call)."""
        return self is not ReflectOutcome.CALL_FAILED


@dataclass
class ReflectData(NodeData, owner="reflect"):
    """What reflection did to a node: its outcome (None: never reflected) and, when it was patched
    onto the best program (its `parent_id` is then the best's), the parent it was designed on."""

    outcome: ReflectOutcome | None = None
    patched_from: str | None = None

    def __post_init__(self) -> None:
        if self.outcome is not None:  # read back from the node database as its text
            self.outcome = ReflectOutcome(self.outcome)
