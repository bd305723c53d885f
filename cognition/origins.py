"""Where each cognition item came from: one row per (item, run, task, person, provenance), written
with every write of the item, and by a duplicate of it (the same text, or one too alike), so an item
several runs arrived at keeps every provenance. A second LanceDB table beside the items."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from evoforge.cognition.entries import CognitionItem

TABLE = "origins"
_FIELDS = ("item_id", "run_id", "task", "person", "provenance", "at")
_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("item_id", pa.string()),
    pa.field("run_id", pa.string()),
    pa.field("task", pa.string()),
    pa.field("person", pa.string()),
    pa.field("provenance", pa.string()),
    pa.field("at", pa.float64()),
])


@dataclass(frozen=True)
class Origin:
    """One arrival of an item: which run (of which task, by whom) wrote it, and how."""

    item_id: str
    run_id: str
    task: str
    person: str
    provenance: str
    at: float

    @classmethod
    def of(cls, item: CognitionItem, item_id: str | None = None) -> Origin:
        """`item`'s arrival, recorded against `item_id` (another item it duplicates) or its own id."""
        return cls(item_id or item.id, item.run_id, item.task or "", item.person, item.provenance,
                   item.created_at)

    @property
    def key(self) -> str:
        """The row's id: the same arrival recorded twice (a resume's catch-up) is one row."""
        text = "\0".join((self.item_id, self.run_id, self.task, self.person, self.provenance))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def describe(self) -> str:
        """One line: the provenance, then run, task and person where known."""
        where = [f"run {self.run_id}" if self.run_id else "", f"task {self.task}" if self.task else "",
                 f"by {self.person}" if self.person else ""]
        return "; ".join([self.provenance or "(no provenance)", *filter(None, where)])


class Origins:
    """The origins table of a base (opened by the caller's LanceDB connection; the caller holds the
    base's write lock while it records)."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self._table: Any = None

    def _opened(self, create: bool) -> bool:
        if self._table is None:
            if TABLE in self._db.list_tables().tables:
                self._table = self._db.open_table(TABLE)
            elif create:
                self._table = self._db.create_table(TABLE, schema=_SCHEMA, exist_ok=True)
        return self._table is not None

    def record(self, origins: list[Origin]) -> int:
        """Store the arrivals not stored yet; how many were new."""
        fresh = {origin.key: origin for origin in origins}
        if not fresh:
            return 0
        self._opened(create=True)
        keys = ", ".join("'" + key + "'" for key in fresh)
        for row in self._table.search().select(["id"]).where(f"id IN ({keys})").limit(len(fresh)).to_list():
            fresh.pop(row["id"], None)
        if fresh:
            columns = {"id": list(fresh)} | {name: [getattr(origin, name) for origin in fresh.values()]
                                             for name in _FIELDS}
            self._table.add(pa.Table.from_pydict(columns, schema=_SCHEMA))
        return len(fresh)

    def of(self, item_id: str) -> list[Origin]:
        """Every recorded arrival of the item, oldest first."""
        if not self._opened(create=False):
            return []
        quoted = "'" + item_id.replace("'", "''") + "'"
        rows = self._table.search().where(f"item_id = {quoted}").select(list(_FIELDS)).limit(None).to_list()
        return sorted((Origin(**{name: row[name] for name in _FIELDS}) for row in rows), key=lambda o: o.at)
