"""The Node: one candidate program and everything known about it."""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from evoforge.infra.node_data import container_fields, copy_owned


class Status(StrEnum):
    """The one status vocabulary of a candidate, shared by the items on the queues, the nodes in
    the database, the run's counters and the snapshots."""

    PROPOSED = "proposed"  # designed, not yet evaluated (re-queued on resume)
    SPECULATIVE = "speculative"  # in the pool on a partial evaluation, awaiting confirmation
    EVALUATED = "evaluated"  # fully evaluated: in the pool
    FAILED = "failed"  # the LLM answer, an internal step or the evaluation failed (see failed_stage)
    REJECTED = "rejected"  # not evaluated: a duplicate or near-duplicate of an earlier program
    STALE = "stale"  # dropped by the staleness policy or by reflection
    PRUNED = "pruned"  # evaluation stopped early: its validation prefix could not beat the pool
    ROLLED_BACK = "rolled_back"  # entered the pool speculatively, the full evaluation disagreed

    @property
    def terminal(self) -> bool:
        """True once nothing more will happen to the candidate."""
        return self not in (Status.PROPOSED, Status.SPECULATIVE)


PROPOSED, SPECULATIVE, EVALUATED = Status.PROPOSED, Status.SPECULATIVE, Status.EVALUATED
FAILED, REJECTED, STALE = Status.FAILED, Status.REJECTED, Status.STALE
PRUNED, ROLLED_BACK = Status.PRUNED, Status.ROLLED_BACK

# Evaluation levels; each has its own score column, never one mixed column. The node carries the
# scores selection may use (pilot, full); held-out `final` scores live apart from nodes, in a
# table only the final report writes (flows/final_report.py), so no code that selects reads them.
SCORE_LEVELS = ("pilot", "full", "final")
SELECTION_LEVELS = ("pilot", "full")


def new_node_id() -> str:
    """A short unique node id."""
    return uuid.uuid4().hex[:12]


@dataclass
class Node:
    """One candidate's core: identity, lineage, the artifact (its code, change, reason and knob
    values), per-level scores, status, timing and tokens; what one stage alone writes is that
    stage's data in `owned`."""

    id: str
    run_id: str
    code: str
    parent_id: str | None = None
    island: int = 0
    generation: int = 0
    diff: str = ""  # the change from the parent (written by whichever stage proposes: research, merge, ...)
    motivation: str = ""  # the proposer's reason for it
    origin: str = "novel"  # seed | cognition | experience | novel
    backend: str = ""  # openai | offline | seed
    model: str = ""
    pool_version: int = 0
    score_pilot: float | None = None
    score_full: float | None = None
    score_partial: float | None = None  # on the validation prefix (speculative completion)
    metrics: dict[str, float] = field(default_factory=dict)
    case_scores: dict[str, float] = field(default_factory=dict)  # objective per validation case
    cases_done: int = 0
    artifacts: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)  # knob values evaluated with the code (best trial)
    status: Status = Status.PROPOSED
    error: str | None = None
    failed_stage: str | None = None  # the stage that failed it: research | reflect | engineer | ...
    reason: str | None = None  # why it failed, rejected or went stale: one of infra/failure_reasons.py
    speculative_at: float | None = None  # when it entered the pool on a partial score
    tokens_in: int = 0
    tokens_out: int = 0
    llm_s: float = 0.0
    eval_s: float = 0.0
    eval_cpu_s: float = 0.0  # CPU seconds of every evaluation of it: defaults, trials, promotion
    created_at: float = field(default_factory=time.time)
    evaluated_at: float | None = None
    next_stage: str | None = None  # where a persisted proposal goes next (a resumed run sends it there)
    # stage name -> its data (infra/node_data.py): what one stage alone writes lives there, e.g. the
    # research stage's inspirations (stages/research_data.py) or the judge's score (stages/judge_data.py)
    owned: dict[str, Any] = field(default_factory=dict)

    def score(self, level: str = "full") -> float | None:
        """The score of one selection level (pilot or full; final scores are not on nodes)."""
        if level not in SELECTION_LEVELS:
            raise ValueError(f"nodes carry {', '.join(SELECTION_LEVELS)} scores, not {level!r}")
        return getattr(self, f"score_{level}")

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    def copy(self, **changes: Any) -> Node:
        """A private copy (its lists and dicts, and each stage's data, too) with `changes` applied:
        what a stage works on, so that the node the pool or another stage holds never changes
        under it. What is copied deeper follows from the field types."""
        fresh = replace(self, **changes)
        for name in container_fields(Node):
            if name not in changes:
                value = getattr(self, name)
                setattr(fresh, name, copy_owned(value) if name == "owned" else copy.copy(value))
        return fresh

    @property
    def was_evaluated(self) -> bool:
        """True once an evaluation ran on this node (successful or not)."""
        return self.evaluated_at is not None
