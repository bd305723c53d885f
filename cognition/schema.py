"""The cognition table's columns, the embedder it was built with (kept in the table's own schema,
so a base at any URI carries it), and bringing a table made by an older evoforge up to date."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from evoforge.cognition.entries import REFUTED, CognitionItem

FIELDS = ("id", "title", "text", "source", "tags", "task", "provenance", "created_at", "status",
          "verdict", "quote", "locator", "run_id", "person")
# columns added after the first release, with the value a row written before them gets
LATER_COLUMNS = {"status": "'accepted'", "verdict": "''", "quote": "''", "locator": "''",
                 "run_id": "''", "person": "''"}
EMBEDDER_KEY, DIM_KEY = b"evoforge.embedder", b"evoforge.dim"


def item_schema(dim: int, embedder: str) -> pa.Schema:
    """The items table's schema for `dim`-d vectors of `embedder`."""
    strings = [pa.field(name, pa.string()) for name in LATER_COLUMNS]
    return pa.schema([
        pa.field("id", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("text", pa.string()),
        pa.field("source", pa.string()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("task", pa.string()),
        pa.field("provenance", pa.string()),
        pa.field("created_at", pa.float64()),
        *strings,
        pa.field("vector", pa.list_(pa.float32(), dim)),
    ], metadata={EMBEDDER_KEY: embedder.encode(), DIM_KEY: str(dim).encode()})


def embedder_of(schema: pa.Schema) -> dict[str, Any] | None:
    """The embedder name and dimension a table's schema records (None: a table made before it did)."""
    meta = schema.metadata or {}
    if EMBEDDER_KEY not in meta or DIM_KEY not in meta:
        return None
    return {"embedder": meta[EMBEDDER_KEY].decode(), "dim": int(meta[DIM_KEY])}


def missing_columns(schema: pa.Schema) -> dict[str, str]:
    """The later columns a table lacks, with the SQL value its old rows get."""
    return {name: value for name, value in LATER_COLUMNS.items() if name not in schema.names}


def item_of(row: dict[str, Any]) -> CognitionItem:
    """The item a table row holds."""
    return CognitionItem(**{name: row[name] for name in FIELDS} | {"tags": list(row["tags"] or [])})


def sql_quote(value: str) -> str:
    """A string as a SQL literal for LanceDB's filters."""
    return "'" + value.replace("'", "''") + "'"


def is_uri(location: str | Path) -> bool:
    """Whether a base's location is a URI (s3://, gs://, az://, ...) rather than a folder."""
    return "://" in str(location)


def retrievable_row(statuses: tuple[str, ...] | None):  # noqa: ANN202 - a row predicate or None
    """A row predicate for the in-memory search: of these statuses, no refuted lesson (None: all)."""
    if statuses is None:
        return None
    return lambda row: row["status"] in statuses and row["verdict"] != REFUTED


def retrievable_where(statuses: tuple[str, ...] | None) -> str | None:
    """The same as a LanceDB filter."""
    if statuses is None:
        return None
    return f"status IN ({', '.join(map(sql_quote, statuses))}) AND verdict != {sql_quote(REFUTED)}"
