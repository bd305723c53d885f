"""The node database sink: every node event becomes a row of `nodes.duckdb`, every batch one
transaction; it is the run's source of truth, the one every other sink catches up from.

Rows are the events' node copies, the newest of each node in a batch; metadata keys (pool
version, case order, plans, promotions, wall time, sampler state) ride on the events. A failed
write keeps what it could not write, and the next batch (or the close) tries it again, so a
record is late, never lost, while the run goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.sinks.base import Event, EventKind, Sink

_UNSET = object()
_NODE_EVENTS = (EventKind.PROPOSED, EventKind.RELEASED, EventKind.FINISHED, EventKind.CHANGED)


class NodeDatabase(Sink):
    """Writes nodes, run metadata and final scores to the run's DuckDB file."""

    name = "nodes"
    interval_s = 0.5
    critical_after = 3  # a database that cannot be written stops the run: nothing more is lost

    def __init__(self, store: NodeStore) -> None:
        self.store = store
        self._rows: dict[str, Node] = {}
        self._meta: dict[str, Any] = {}
        self._written: dict[str, Any] = {}  # meta as last written: an unchanged key is not written again
        self.transactions = 0
        self.rows_written = 0

    def urgent(self, event: Event) -> bool:
        return event.kind == EventKind.PROPOSED

    def pending(self) -> int:
        return len(self._rows) + len(self._meta)

    def record(self, events: Sequence[Event]) -> None:
        finals = []
        for event in events:
            if event.kind in _NODE_EVENTS and event.node is not None:
                self._rows[event.node.id] = event.node
            elif event.kind == EventKind.FINAL:
                finals.extend(event.payload[0])
            self._meta.update((k, v) for k, v in event.meta.items() if self._written.get(k, _UNSET) != v)
        if finals:
            self.store.write_final(finals)
        if not self._rows and not self._meta:
            return
        rows, meta = list(self._rows.values()), dict(self._meta)
        self.store.write(rows, meta)  # raises: kept, tried again with the next batch
        self._rows.clear()
        self._meta.clear()
        self._written.update(meta)
        self.transactions += 1
        self.rows_written += len(rows)

    def close(self) -> None:
        try:
            if self.pending():
                self.record([])  # the last try of what failed before
        finally:
            self.store.close()
