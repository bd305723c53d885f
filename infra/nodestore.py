"""The node database: one DuckDB file per run, written by one writer (its sink's thread).

Rows are appended, never updated in place: each write of a node adds a version of it to
`node_rows`, and the view `nodes` shows the latest version of each (measured here: an append
costs a third of DuckDB's insert-or-replace on a primary key, ~2 ms against ~6 ms a
transaction). Closing the writer drops the older versions. A file of an earlier evoforge, whose
`nodes` is a table keyed by id, or whose columns hold data a stage owns now (nodestore_legacy.py),
is moved over when a writer opens it; a reader reads it as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from evoforge.infra.node_data import dump_owned, is_container_type, owned_from
from evoforge.infra.nodes import EVALUATED, Node, Status
from evoforge.infra.nodestore_legacy import LEGACY, fold_legacy, fold_reflect_outcome

_SCALARS = {"str": "VARCHAR", "Status": "VARCHAR", "int": "BIGINT", "float": "DOUBLE"}


def _sql_type(annotation: object) -> str:
    """The column type of a Node field, from its annotation: containers are JSON text."""
    if is_container_type(annotation):
        return "VARCHAR"
    return _SCALARS[str(annotation).removesuffix(" | None")]



_OWNED = "owned"  # stage-owned data: one JSON column, each owner's dataclass as its fields
# containers are JSON text, read back empty when NULL: which fields they are follows from the types
_EMPTY = {f.name: (list if str(f.type).startswith("list") else dict)
          for f in fields(Node) if is_container_type(f.type) and f.name != _OWNED}
_JSON_FIELDS = set(_EMPTY)
_COLUMNS = [f.name for f in fields(Node)]
_NAMES = ", ".join(_COLUMNS)  # explicit: a migrated table has its newer columns last
_ARROW = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64()}
_SCHEMA = pa.schema([(f.name, _ARROW[_sql_type(f.type)]) for f in fields(Node)])
_BULK_ROWS = 3  # from this many rows, one Arrow batch beats row-by-row inserts (measured: 8x at 32)


_FINAL_SCHEMA = ("CREATE TABLE IF NOT EXISTS final_scores (node_id VARCHAR PRIMARY KEY, rank BIGINT, "
                 "score DOUBLE, metrics VARCHAR, error VARCHAR, seconds DOUBLE, cpu_s DOUBLE, "
                 "evaluated_at DOUBLE)")


@dataclass(frozen=True)
class FinalScore:
    """A held-out (`final` level) score, kept apart from the node so that selection cannot see it."""

    node_id: str
    rank: int  # the search's rank of the node at `full` (1: its winner), fixed before evaluating
    score: float | None
    metrics: dict[str, float]
    error: str | None
    seconds: float
    cpu_s: float
    evaluated_at: float


class StoreBusyError(RuntimeError):
    """Another process holds the node database (a run is going)."""


def _schema() -> str:
    cols = [f"{f.name} {_sql_type(f.type)}" for f in fields(Node)]
    return "CREATE TABLE IF NOT EXISTS node_rows (" + ", ".join(cols) + ")"


_LATEST = ("CREATE OR REPLACE VIEW nodes AS SELECT * EXCLUDE (_version) FROM (SELECT *, row_number() "
           "OVER (PARTITION BY id ORDER BY rowid DESC) AS _version FROM node_rows) WHERE _version = 1")


class NodeStore:
    """Nodes and run metadata in DuckDB; opening it for writing locks the file to this process."""

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path)
        try:
            self._con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise StoreBusyError(f"{self.path} is held by a running evoforge process") from None
            raise
        self._writer = not read_only
        if not read_only:
            # one writer, small transactions: a pool of query threads only spins (measured: a
            # one-row flush costs ~25% less CPU with one thread)
            self._con.execute("SET threads = 1")
            self._move_keyed_table()
            self._con.execute(_schema())
            self._con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            self._con.execute(_FINAL_SCHEMA)
            self._add_missing_columns()
            self._con.execute(_LATEST)
        have = {r[0] for r in self._con.execute("DESCRIBE nodes").fetchall()}
        self._readable = [c for c in _COLUMNS if c in have]  # a read-only older file lacks new ones
        self._legacy = [c for c in LEGACY if c in have]
        if self._writer and self._legacy:
            self._move_legacy_columns()

    def _move_legacy_columns(self) -> None:
        """An earlier evoforge's columns of stage-owned data move into the owned column and are
        dropped, in one transaction: each node's latest version is written again with them folded
        in (idempotent: a moved file has no such column left)."""
        nodes = self._select("ORDER BY created_at, id")
        self._con.execute("BEGIN TRANSACTION")
        try:
            self._con.execute("DELETE FROM node_rows")
            for column in self._legacy:
                self._con.execute(f"ALTER TABLE node_rows DROP COLUMN {column}")
            self._con.execute(_LATEST)
            self._legacy = []
            self._insert(nodes)
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def _move_keyed_table(self) -> None:
        """An earlier evoforge's `nodes` table (one row per id, a primary key) becomes the first
        versions of `node_rows`, in one transaction."""
        kinds = dict(self._con.execute("SELECT table_name, table_type FROM information_schema.tables "
                                       "WHERE table_name IN ('nodes', 'node_rows')").fetchall())
        if kinds.get("nodes") != "BASE TABLE" or "node_rows" in kinds:
            return
        self._con.execute("BEGIN TRANSACTION")
        self._con.execute("CREATE TABLE node_rows AS SELECT * FROM nodes ORDER BY created_at, id")
        self._con.execute("DROP TABLE nodes")
        self._con.execute("COMMIT")

    def _add_missing_columns(self) -> None:
        """A database written by an older evoforge gains the node fields added since (empty)."""
        have = {r[0] for r in self._con.execute("DESCRIBE node_rows").fetchall()}
        for f in fields(Node):
            if f.name not in have:
                self._con.execute(f"ALTER TABLE node_rows ADD COLUMN {f.name} {_sql_type(f.type)}")

    def reader(self) -> NodeStore:
        """A reader on the same database for another thread (a cursor: its own connection to the
        same instance, so the writer's thread keeps its own)."""
        other = object.__new__(NodeStore)
        other.path, other._con, other._writer = self.path, self._con.cursor(), False
        other._readable, other._legacy = self._readable, self._legacy
        return other

    def close(self) -> None:
        """Close; the writer first drops the versions of nodes that a later one replaced."""
        try:
            if self._writer:
                self._con.execute("DELETE FROM node_rows WHERE rowid NOT IN "
                                  "(SELECT max(rowid) FROM node_rows GROUP BY id)")
        finally:
            self._con.close()

    def __enter__(self) -> NodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put(self, node: Node) -> None:
        """Record one node (its latest version)."""
        self.write([node], {})

    def write(self, nodes: list[Node], meta: dict[str, Any]) -> None:
        """Record the nodes (a new version of each) and set meta keys, all in one transaction."""
        if not nodes and not meta:
            return
        self._con.execute("BEGIN TRANSACTION")
        try:
            self._insert(nodes)
            if meta:  # one statement: each costs ~1.5 ms of CPU, whatever its size
                self._con.execute("INSERT OR REPLACE INTO meta VALUES " + ", ".join("(?, ?)" for _ in meta),
                                  [part for key, value in meta.items() for part in (key, json.dumps(value))])
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def _insert(self, nodes: list[Node]) -> None:
        """Append a version of each node to `node_rows` (inside the caller's transaction)."""
        rows = []
        for node in nodes:
            row = {f: getattr(node, f) for f in _COLUMNS}
            row["status"] = str(row["status"])
            row[_OWNED] = dump_owned(node.owned)
            rows.append([json.dumps(row[c]) if c in _JSON_FIELDS else row[c] for c in _COLUMNS])
        if len(rows) >= _BULK_ROWS:
            batch = pa.Table.from_arrays([pa.array(col, type=_SCHEMA.field(i).type)
                                          for i, col in enumerate(zip(*rows, strict=True))],
                                         schema=_SCHEMA)
            self._con.register("_evoforge_batch", batch)
            try:
                self._con.execute(f"INSERT INTO node_rows ({_NAMES}) SELECT {_NAMES} FROM _evoforge_batch")
            finally:
                self._con.unregister("_evoforge_batch")
        elif rows:
            marks = ", ".join("?" for _ in _COLUMNS)
            self._con.executemany(f"INSERT INTO node_rows ({_NAMES}) VALUES ({marks})", rows)

    def get(self, node_id: str) -> Node | None:
        rows = self._select("WHERE id = ?", [node_id])
        return rows[0] if rows else None

    def all(self) -> list[Node]:
        """Every node, oldest first."""
        return self._select("ORDER BY created_at, id")

    def count(self, where: str = "", params: list[Any] | None = None) -> int:
        return self._con.execute(f"SELECT count(*) FROM nodes {where}", params or []).fetchone()[0]

    def evaluations(self) -> int:
        """How many evaluations ran in this run (successful or failed)."""
        return self.count("WHERE evaluated_at IS NOT NULL")

    def best(self, maximize: bool = True, level: str = "full") -> Node | None:
        order = "DESC" if maximize else "ASC"
        rows = self._select(
            f"WHERE status = ? AND score_{level} IS NOT NULL "
            f"ORDER BY score_{level} {order}, created_at LIMIT 1",
            [EVALUATED],
        )
        return rows[0] if rows else None

    def write_final(self, rows: list[FinalScore]) -> None:
        """Record held-out `final` scores (the final report's; no node or selection reads them)."""
        for row in rows:
            self._con.execute("INSERT OR REPLACE INTO final_scores VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                              [row.node_id, row.rank, row.score, json.dumps(row.metrics), row.error,
                               row.seconds, row.cpu_s, row.evaluated_at])

    def final_scores(self) -> list[FinalScore]:
        """The held-out scores the final report recorded, in the search's order (empty when none)."""
        try:
            rows = self._con.execute("SELECT * FROM final_scores ORDER BY rank").fetchall()
        except duckdb.CatalogException:  # a read-only older file without the table
            return []
        return [FinalScore(r[0], r[1], r[2], json.loads(r[3] or "{}"), r[4], r[5], r[6], r[7]) for r in rows]

    def set_meta(self, key: str, value: Any) -> None:
        self.write([], {key: value})

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return json.loads(row[0]) if row else default

    def _select(self, tail: str, params: list[Any] | None = None) -> list[Node]:
        columns = self._readable + self._legacy
        cur = self._con.execute(f"SELECT {', '.join(columns)} FROM nodes {tail}", params or [])
        out = []
        for row in cur.fetchall():
            data = dict(zip(columns, row, strict=True))
            for key in _JSON_FIELDS:
                data[key] = json.loads(data[key]) if data.get(key) else _EMPTY[key]()
            data["status"] = Status(data["status"])
            owned = json.loads(data[_OWNED]) if data.get(_OWNED) else {}
            if self._legacy:  # a row an earlier version wrote: its data under its owners
                for column in self._legacy:
                    fold_legacy(owned, column, data.pop(column))
                fold_reflect_outcome(owned)
            data[_OWNED] = owned_from(owned)
            out.append(Node(**data))
        return out
