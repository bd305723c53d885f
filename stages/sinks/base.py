"""Events and sinks: what the head says happened, and the handlers that record it.

The head (flows/head.py) applies each stage result to the in-memory run state and appends one
`Event`. Everything that records or reports is a `Sink`, like a `logging.Handler`: it is given
events in batches (`record`), off the flow's event loop, and catches up from the node database
when a run resumes (`rebuild`). A sink never changes the run state; what it writes is its own.

    >>> class Count(Sink):
    ...     name = "count"
    ...     def __init__(self):
    ...         self.seen = 0
    ...     def record(self, events):
    ...         self.seen += len(events)
    >>> sink = Count()
    >>> sink.record([Event(EventKind.PROPOSED, pool_version=0)])
    >>> sink.seen
    1
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from evoforge.infra.nodes import Node

if TYPE_CHECKING:
    from evoforge.infra.llm_traces import LLMCall
    from evoforge.stages.sinks.run_basics import RunBasics


class EventKind(StrEnum):
    """What happened to the run."""

    PROPOSED = "proposed"  # a designed candidate, persisted before its evaluation (resume re-queues it)
    RELEASED = "released"  # a candidate entered the pool on its validation prefix (speculative)
    FINISHED = "finished"  # a candidate's trip ended: evaluated, failed, rejected, stale, rolled back...
    CHANGED = "changed"  # a node already recorded changed (re-ranked, dropped, a promotion's score)
    PLAN = "plan"  # a new research plan version
    PROMOTION = "promotion"  # a promotion round's summary
    FINAL = "final"  # held-out final scores (the final report)
    PARENT = "parent"  # run-level records: LLM calls of the run (plan agent), parent metrics
    SNAPSHOT = "snapshot"  # the periodic status: status.json, leaderboards
    CLOSE = "close"  # the session ends: last metadata, the run's outcome


@dataclass(frozen=True)
class Event:
    """One thing that happened, as the head saw it; `node` is a copy no one changes afterwards."""

    kind: EventKind
    node: Node | None = None
    pool_version: int = 0
    evaluations: int = 0  # the run's evaluations so far (MLflow steps)
    new_best: bool = False  # the pool has a new best (or winner) because of this event
    best: Node | None = None  # the search's answer after the event, when it changed (a copy)
    prompt: Sequence[Mapping[str, str]] = ()  # the research prompt (node files)
    answer: str = ""  # the research answer (node files)
    llm_calls: Sequence[LLMCall] = ()  # calls made for the candidate (MLflow traces)
    owned: Mapping[str, Any] = field(default_factory=dict)  # stage name -> what the stage hands its sink
    gain: float | None = None  # FINISHED: the candidate's gain over its parent (None: not scored)
    meta: Mapping[str, Any] = field(default_factory=dict)  # run metadata to persist with the event
    payload: Any = None  # PLAN, PROMOTION, FINAL, PARENT, SNAPSHOT, CLOSE: the record itself
    at: float = field(default_factory=time.time)


class Sink(ABC):
    """Records events. Subclasses set `name` and implement `record`; `rebuild` catches up after
    a kill (from the node database, which is the source of truth), `close` ends the session.

    `interval_s` is how long an event may wait for others to be recorded with it (batching); the
    hub calls `record` on the sink's own thread, never on the flow's event loop. An exception out
    of `record` is counted against the sink and logged with its traceback; the run goes on, and the
    same events (with any that came since) are given to `record` again after a backoff, so a
    sink writes them such that a second time changes nothing. At most `max_pending` events wait
    for a sink; beyond that the oldest are dropped and counted as never recorded.
    """

    name: ClassVar[str]
    interval_s: ClassVar[float] = 1.0
    # a critical sink (the node database: the source of truth) that fails this many batches in a
    # row stops the run through its fatal path, so that no more work goes unrecorded
    critical_after: ClassVar[int | None] = None
    max_pending: ClassVar[int] = 5_000  # events held for a failing or slow sink (bounded memory)

    @classmethod
    def for_run(cls, run: RunBasics) -> Sink:
        """The sink for one run, made from its read-only facts (a plug-in sink: once per run;
        docs/extend/sink.md); by default `cls()`."""
        return cls()

    @abstractmethod
    def record(self, events: Sequence[Event]) -> None:
        """Write what these events say (in order)."""

    def urgent(self, event: Event) -> bool:
        """True for an event this sink records at once instead of waiting `interval_s` for others
        (the node database: a proposal, so that a restart finds it however soon the run is killed)."""
        return False

    def gauges(self) -> dict[str, Any]:
        """Figures of the sink's own for status.json (`sinks.<name>`); read from the event loop."""
        return {}

    def rebuild(self, nodes: Sequence[Node]) -> None:
        """Catch up with the node database on resume: write what a killed session left unwritten,
        nothing twice."""
        return None

    def close(self) -> None:
        """The session ends: release what the sink holds (after its last `record`)."""
        return None

    def __repr__(self) -> str:
        return f"<sink {self.name}>"
