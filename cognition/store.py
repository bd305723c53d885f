"""The cognition base: a LanceDB table of knowledge items and their vectors, in one folder.

The folder also holds ``cognition.json``, naming the embedder and dimension the vectors came
from, so a base is never searched with vectors from another space.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa

from evoforge.cognition.embedder import Embedder
from evoforge.cognition.entries import CognitionItem
from evoforge.cognition.errors import CognitionError
from evoforge.cognition.memo import Memo
from evoforge.cognition.snapshot import SMALL_ROWS, TableSnapshot

TABLE = "items"
META_FILE = "cognition.json"
_MAX_FRAGMENTS = 16  # more data files than this and the next add compacts them (~0.2 s at 10k items)
_FIELDS = ("id", "title", "text", "source", "tags", "task", "provenance", "created_at")


def _schema(dim: int) -> pa.Schema:
    return pa.schema([
        pa.field("id", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("text", pa.string()),
        pa.field("source", pa.string()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("task", pa.string()),
        pa.field("provenance", pa.string()),
        pa.field("created_at", pa.float64()),
        pa.field("vector", pa.list_(pa.float32(), dim)),
    ])


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _item(row: dict[str, Any]) -> CognitionItem:
    return CognitionItem(**{name: row[name] for name in _FIELDS} | {"tags": list(row["tags"] or [])})


class CognitionBase:
    """Knowledge items searchable by meaning; the same text is stored once.

    >>> from evoforge.cognition.lexical import LexicalEmbedder
    >>> import tempfile
    >>> base = CognitionBase(tempfile.mkdtemp(), LexicalEmbedder())
    >>> added = base.add([CognitionItem.create("Best fit", "Put the item where it leaves least room.")])
    >>> [item.title for item, _ in base.search("least room left", k=1)]
    ['Best fit']
    """

    def __init__(self, folder: str | Path, embedder: Embedder) -> None:
        self.folder = Path(folder)
        self.embedder = embedder
        # a zero interval: every read sees what other processes (runs, the CLI) have written
        self._db = lancedb.connect(self.folder, read_consistency_interval=timedelta(0))
        self._table: Any = None
        self._dim: int | None = None
        # query embeddings by text, and search results by query and table version: many candidates
        # share a parent, so the learn stage asks the same question of an unchanged base again
        self.vector_memo: Memo[np.ndarray] = Memo()
        self.search_memo: Memo[list[tuple[CognitionItem, float]]] = Memo()
        self._snapshot: tuple[int, TableSnapshot | None] | None = None  # (version, its rows if small)
        self._open_existing()

    def _open_existing(self) -> None:
        """Open the table when the folder holds one, checking it was built by this embedder."""
        meta = self._read_meta()
        has_table = TABLE in self._db.list_tables().tables
        if meta is None:
            if has_table:
                raise CognitionError(f"{self.folder} holds a table '{TABLE}' but no {META_FILE}: "
                                     "not an evoforge cognition base")
            return
        if meta["embedder"] != self.embedder.name and meta["embedder"] not in self.embedder.same_space:
            raise CognitionError(
                f"cognition base {self.folder} was built with embedder '{meta['embedder']}' "
                f"({meta['dim']}-d), not '{self.embedder.name}': set cognition.embedding to match, "
                "or use another workspace")
        self._dim = int(meta["dim"])
        if has_table:  # else another process has written the metadata and is creating the table
            self._table = self._db.open_table(TABLE)

    def _opened(self) -> bool:
        """Whether the table exists (looking again, as another process may have created it)."""
        if self._table is None:
            self._open_existing()
        return self._table is not None

    def _read_meta(self) -> dict[str, Any] | None:
        path = self.folder / META_FILE
        if not path.is_file():
            return None
        try:
            meta = json.loads(path.read_text())
            if not isinstance(meta, dict) or not {"embedder", "dim"} <= meta.keys():
                raise ValueError("needs 'embedder' and 'dim'")
        except ValueError as exc:
            raise CognitionError(f"{path}: not a valid cognition metadata file ({exc})") from None
        return meta

    def _vectors(self, texts: list[str]) -> np.ndarray:
        vectors = self.embedder.embed(texts)
        rows, dim = vectors.shape
        if rows != len(texts) or (self._dim is not None and dim != self._dim):
            raise CognitionError(f"embedder '{self.embedder.name}' gave vectors of shape {vectors.shape}, "
                                 f"the cognition base {self.folder} holds {self._dim}-d vectors")
        return vectors

    def _create(self, dim: int) -> None:
        """Create the table: the metadata first, so no process ever sees a table it cannot check."""
        if self._dim is not None and dim != self._dim:
            raise CognitionError(f"embedder '{self.embedder.name}' gives {dim}-d vectors, "
                                 f"the cognition base {self.folder} holds {self._dim}-d vectors")
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = {"embedder": self.embedder.name, "dim": dim, "table": TABLE}
        scratch = self.folder / f".{META_FILE}.{os.getpid()}"
        scratch.write_text(json.dumps(meta, indent=2) + "\n")
        scratch.replace(self.folder / META_FILE)
        self._table = self._db.create_table(TABLE, schema=_schema(dim), exist_ok=True)
        self._dim = dim

    def _rows(self, where: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        if not self._opened():
            return []
        query = self._table.search().select(list(_FIELDS))
        if where is not None:
            query = query.where(where)
        return query.limit(limit).to_list()

    def add(self, items: Iterable[CognitionItem],
            vectors: dict[str, np.ndarray] | None = None) -> list[CognitionItem]:
        """Store the items whose text is new; returns those added, in order (duplicates skipped).
        `vectors`: embeddings the caller already has, by item id (the rest are embedded here)."""
        fresh: dict[str, CognitionItem] = {}
        for item in items:
            fresh.setdefault(item.id, item)
        if fresh and self._opened():
            ids = ", ".join(_quote(i) for i in fresh)
            for row in self._rows(f"id IN ({ids})", limit=len(fresh)):
                fresh.pop(row["id"], None)
        if not fresh:
            return []
        new = list(fresh.values())
        known = vectors or {}
        if all(item.id in known for item in new):
            vectors = np.stack([known[item.id] for item in new])
        else:
            vectors = self._vectors([item.embedding_text() for item in new])
        if self._table is None:
            self._create(vectors.shape[1])
        columns = {name: [getattr(item, name) for item in new] for name in _FIELDS}
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel())
        columns["vector"] = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
        data = pa.Table.from_pydict(columns, schema=_schema(vectors.shape[1]))
        # insert-if-absent in one transaction, so two runs seeding at once still store each text once
        self._table.merge_insert("id").when_not_matched_insert_all().execute(data)
        self._compact_if_fragmented()
        return new

    def _compact_if_fragmented(self) -> None:
        """Merge the small files that one-at-a-time write-backs leave (300 of them slow a search 3x)."""
        if self._table.stats()["fragment_stats"]["num_fragments"] > _MAX_FRAGMENTS:
            self._table.optimize()

    def add_if_novel(self, item: CognitionItem, max_similarity: float,
                     vector: np.ndarray | None = None) -> CognitionItem | None:
        """Add ``item`` unless a stored item of its task (or a task-less one) is at least this
        similar; ``vector``: its embedding, when the caller has it (it is embedded once either way)."""
        if vector is None:
            vector = self._vectors([item.embedding_text()])[0]
        nearest = self.search_vector(vector, k=1, task=item.task)
        if nearest and nearest[0][1] >= max_similarity:
            return None
        added = self.add([item], vectors={item.id: vector})
        return added[0] if added else None

    def add_novel(self, items: list[CognitionItem], max_similarity: float) -> list[CognitionItem]:
        """Add the items that are new: not stored already (same text), not at least this similar
        to a stored item of their task, nor to an item added before them in this call. One
        embedder call for all of them, one write; returns those added, in order."""
        if not items:
            return []
        stored = self.known_ids([item.id for item in items])
        items = [item for item in items if item.id not in stored]
        if not items:
            return []
        vectors = self.embed(items)
        keep: list[int] = []
        for i, item in enumerate(items):
            nearest = self.search_vector(vectors[i], k=1, task=item.task)
            if nearest and nearest[0][1] >= max_similarity:
                continue
            if any(float(np.dot(vectors[i], vectors[j])) >= max_similarity for j in keep):
                continue
            keep.append(i)
        return self.add([items[i] for i in keep], vectors={items[i].id: vectors[i] for i in keep})

    def known_ids(self, ids: list[str]) -> set[str]:
        """Which of these item ids the base holds."""
        if not ids or not self._opened():
            return set()
        quoted = ", ".join(_quote(i) for i in dict.fromkeys(ids))
        return {row["id"] for row in self._rows(f"id IN ({quoted})", limit=len(ids))}

    def embed(self, items: list[CognitionItem]) -> np.ndarray:
        """The items' embeddings in one call of this base's embedder (one row per item)."""
        return self._vectors([item.embedding_text() for item in items])

    def query_vector(self, query: str) -> np.ndarray:
        """The embedding of a query text (to search several bases of the same embedder with),
        computed once per text while it stays among the recent ones (read-only)."""
        return self.vector_memo.get(query, lambda: self._frozen(self._vectors([query])[0]))

    @staticmethod
    def _frozen(vector: np.ndarray) -> np.ndarray:
        vector.flags.writeable = False
        return vector

    def has_table(self) -> bool:
        """Whether the base holds a table yet (looked for again until it does; no read after)."""
        return self._opened()

    def version(self) -> int | None:
        """The table's version, which every write (of any process) raises; None without a table."""
        return int(self._table.version) if self._opened() else None

    def search(
        self, query: str, k: int = 5, task: str | None = None, min_score: float | None = None
    ) -> list[tuple[CognitionItem, float]]:
        """The ``k`` items nearest in meaning to ``query``, best first, with cosine similarity."""
        if not self._opened():
            return []
        return self.search_vector(self.query_vector(query), k, task, min_score)

    def search_vector(
        self, vector: np.ndarray, k: int = 5, task: str | None = None, min_score: float | None = None
    ) -> list[tuple[CognitionItem, float]]:
        """Like ``search``, for a query already embedded by this base's embedder; the same search
        of an unchanged table is answered from memory (a new list each time)."""
        if k < 1 or not self._opened():
            return []
        vector = np.asarray(vector, dtype=np.float32)
        version = self.version()
        key = (vector.tobytes(), k, task, min_score, version)
        return list(self.search_memo.get(key, lambda: self._search(vector, k, task, min_score, version)))

    def _search(self, vector: np.ndarray, k: int, task: str | None, min_score: float | None,
                version: int | None) -> list[tuple[CognitionItem, float]]:
        snapshot = self._small_snapshot(version)
        if snapshot is not None:  # a small table: the same exact search, in memory
            hits = [(_item(row), score) for row, score in snapshot.nearest(vector, k, task)]
        else:
            query = self._table.search(vector, vector_column_name="vector")
            query = query.distance_type("cosine").select([*_FIELDS, "_distance"]).limit(k)
            if task is not None:
                query = query.where(f"task IS NULL OR task = {_quote(task)}", prefilter=True)
            hits = [(_item(row), 1.0 - float(row["_distance"])) for row in query.to_list()]
        return [hit for hit in hits if min_score is None or hit[1] >= min_score]

    def _small_snapshot(self, version: int | None) -> TableSnapshot | None:
        """The table's rows at `version` when it has at most SMALL_ROWS of them, read once per
        version (a write landing during the read makes them newer than their key, never older)."""
        held = self._snapshot
        if held is not None and held[0] == version:
            return held[1]
        snapshot = None
        if self._table.count_rows() <= SMALL_ROWS:
            rows = self._table.to_arrow().select([*_FIELDS, "vector"]).to_pylist()
            snapshot = TableSnapshot.of(rows, self._dim or 0)
        if version is not None:
            self._snapshot = (version, snapshot)
        return snapshot

    def list(self, task: str | None = None) -> list[CognitionItem]:
        """Every item (of ``task`` and task-less ones, when given), oldest first."""
        where = None if task is None else f"task IS NULL OR task = {_quote(task)}"
        return sorted((_item(row) for row in self._rows(where)), key=lambda i: (i.created_at, i.id))

    def get(self, item_id: str) -> CognitionItem | None:
        """The item with this id, or None."""
        rows = self._rows(f"id = {_quote(item_id)}", limit=1)
        return _item(rows[0]) if rows else None

    def remove(self, item_id: str) -> bool:
        """Delete the item with this id; False when there was none."""
        if not self._opened() or not self._table.count_rows(f"id = {_quote(item_id)}"):
            return False
        self._table.delete(f"id = {_quote(item_id)}")
        return True

    def count(self) -> int:
        """How many items the base holds."""
        return self._table.count_rows() if self._opened() else 0
