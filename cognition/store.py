"""The cognition base: a LanceDB table of knowledge items and their vectors, at a folder or a URI.

The table's schema names the embedder and dimension its vectors came from, so a base is never
searched with vectors from another space (a folder also holds ``cognition.json`` saying so, as
bases made before the schema did). A base is shared by many runs, of many processes and machines:
writes hold the base's write lock (cognition/write_lock.py), so a text is stored once, and every
arrival of an item is kept in the origins table (cognition/origins.py).
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
from evoforge.cognition.entries import ACCEPTED, STATUSES, CognitionItem
from evoforge.cognition.errors import CognitionError
from evoforge.cognition.memo import Memo
from evoforge.cognition.origins import Origin, Origins
from evoforge.cognition.schema import (
    FIELDS,
    embedder_of,
    is_uri,
    item_of,
    item_schema,
    missing_columns,
    retrievable_row,
    retrievable_where,
    sql_quote,
)
from evoforge.cognition.snapshot import SMALL_ROWS, TableSnapshot
from evoforge.cognition.write_lock import WriteLock

TABLE = "items"
META_FILE = "cognition.json"
_MAX_FRAGMENTS = 16  # more data files than this and the next add compacts them (~0.2 s at 10k items)
RETRIEVED = (ACCEPTED,)  # what a search returns unless asked otherwise (never a refuted lesson)


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
        self.folder: Path | str = str(folder) if is_uri(folder) else Path(folder)
        self.embedder = embedder
        # a zero interval: every read sees what other processes (runs, the CLI) have written
        self._db = lancedb.connect(str(self.folder), read_consistency_interval=timedelta(0))
        self.lock = WriteLock(self.folder if isinstance(self.folder, Path) else None)
        self.origins = Origins(self._db)
        self._table: Any = None
        self._dim: int | None = None
        # query embeddings by text, and search results by query and table version: many candidates
        # share a parent, so the learn stage asks the same question of an unchanged base again
        self.vector_memo: Memo[np.ndarray] = Memo()
        self.search_memo: Memo[list[tuple[CognitionItem, float]]] = Memo()
        self._snapshot: tuple[int, TableSnapshot | None] | None = None  # (version, its rows if small)
        self._open_existing()

    def _open_existing(self) -> None:
        """Open the table when the base holds one, checking it was built by this embedder."""
        has_table = TABLE in self._db.list_tables().tables
        table = self._db.open_table(TABLE) if has_table else None
        meta = (embedder_of(table.schema) if table is not None else None) or self._read_meta()
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
        if table is not None:  # else another process has written the metadata and is creating the table
            self._table = table
            if missing_columns(table.schema):
                self._upgrade()

    def _upgrade(self) -> None:
        """Add the columns a base made by an older evoforge lacks (once, whoever comes first)."""
        try:
            with self.lock.held():
                self._table.checkout_latest()
                missing = missing_columns(self._table.schema)
                if missing:
                    self._table.add_columns(missing)
        except PermissionError:
            raise CognitionError(f"cognition base {self.folder} was made by an earlier evoforge and is "
                                 "not writable here: open it once with write access to bring it up to "
                                 "date") from None

    def _opened(self) -> bool:
        """Whether the table exists (looking again, as another process may have created it)."""
        if self._table is None:
            self._open_existing()
        return self._table is not None

    def _read_meta(self) -> dict[str, Any] | None:
        if not isinstance(self.folder, Path):
            return None
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
        """Create the table (the caller holds the write lock), its schema naming the embedder."""
        if self._opened():
            if dim != self._dim:
                raise CognitionError(f"embedder '{self.embedder.name}' gives {dim}-d vectors, "
                                     f"the cognition base {self.folder} holds {self._dim}-d vectors")
            return
        if isinstance(self.folder, Path):  # a folder says so in a file too, readable without LanceDB
            self.folder.mkdir(parents=True, exist_ok=True)
            meta = {"embedder": self.embedder.name, "dim": dim, "table": TABLE}
            scratch = self.folder / f".{META_FILE}.{os.getpid()}"
            scratch.write_text(json.dumps(meta, indent=2) + "\n")
            scratch.replace(self.folder / META_FILE)
        self._table = self._db.create_table(TABLE, schema=item_schema(dim, self.embedder.name), exist_ok=True)
        self._dim = dim

    def _rows(self, where: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        if not self._opened():
            return []
        query = self._table.search().select(list(FIELDS))
        if where is not None:
            query = query.where(where)
        return query.limit(limit).to_list()

    def add(self, items: Iterable[CognitionItem],
            vectors: dict[str, np.ndarray] | None = None) -> list[CognitionItem]:
        """Store the items whose text is new; returns those added, in order (duplicates skipped,
        their arrival kept among the stored item's origins). `vectors`: embeddings the caller
        already has, by item id (the rest are embedded here)."""
        given = list(items)
        fresh: dict[str, CognitionItem] = {}
        for item in given:
            fresh.setdefault(item.id, item)
        if not fresh:
            return []
        known = dict(vectors or {})
        stored = self.known_ids(list(fresh))  # looked at again under the lock
        todo = [item for item in fresh.values() if item.id not in known and item.id not in stored]
        if todo:  # embedded before the lock is taken: the slow part
            texts = [item.embedding_text() for item in todo]
            known.update(zip((item.id for item in todo), self._vectors(texts), strict=True))
        with self.lock.held():
            stored = self.known_ids(list(fresh))
            new = [item for item in fresh.values() if item.id not in stored]
            missing = [item for item in new if item.id not in known]  # removed since we looked
            if missing:
                texts = [item.embedding_text() for item in missing]
                known.update(zip((item.id for item in missing), self._vectors(texts), strict=True))
            if new:
                self._insert(new, np.stack([known[item.id] for item in new]))
            self.origins.record([Origin.of(item) for item in given])
        return new

    def _insert(self, new: list[CognitionItem], vectors: np.ndarray) -> None:
        """Write rows for `new` (the caller holds the lock and checked they are not stored)."""
        if self._table is None:
            self._create(vectors.shape[1])
        columns = {name: [getattr(item, name) for item in new] for name in FIELDS}
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel())
        columns["vector"] = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
        data = pa.Table.from_pydict(columns, schema=item_schema(vectors.shape[1], self.embedder.name))
        # insert-if-absent: at a URI, where no lock spans processes, a text is still stored once
        data = data.select(self._table.schema.names).cast(self._table.schema)  # an upgraded table's order
        self._table.merge_insert("id").when_not_matched_insert_all().execute(data)
        self._compact_if_fragmented()

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
        added = self._add_novel([item], vector[None, :], max_similarity)
        return added[0] if added else None

    def add_novel(self, items: list[CognitionItem], max_similarity: float) -> list[CognitionItem]:
        """Add the items that are new: not stored already (same text), not at least this similar
        to a stored item of their task (whatever its status: a rejected item does not come back),
        nor to an item added before them in this call. A duplicate's arrival is kept among the
        origins of the item it duplicates. One embedder call for all of them, one write; returns
        those added, in order."""
        if not items:
            return []
        stored = self.known_ids([item.id for item in items])
        if stored:
            with self.lock.held():
                self.origins.record([Origin.of(item) for item in items if item.id in stored])
        items = [item for item in items if item.id not in stored]
        return self._add_novel(items, self.embed(items), max_similarity) if items else []

    def _add_novel(self, items: list[CognitionItem], vectors: np.ndarray,
                   max_similarity: float) -> list[CognitionItem]:
        """`add_novel` of embedded items, the check and the write under the lock."""
        with self.lock.held():
            keep: list[int] = []
            arrivals: list[Origin] = []
            for i, item in enumerate(items):
                nearest = self.search_vector(vectors[i], k=1, task=item.task, statuses=None)
                twin = next((items[j].id for j in keep
                             if float(np.dot(vectors[i], vectors[j])) >= max_similarity), None)
                if nearest and nearest[0][1] >= max_similarity:
                    twin = nearest[0][0].id
                if twin is not None:
                    arrivals.append(Origin.of(item, twin))
                    continue
                keep.append(i)
                arrivals.append(Origin.of(item))
            stored = self.known_ids([items[i].id for i in keep])  # written since the caller looked
            keep = [i for i in keep if items[i].id not in stored]
            new = [items[i] for i in keep]
            if new:
                self._insert(new, vectors[keep])
            self.origins.record(arrivals)
        return new

    def known_ids(self, ids: list[str]) -> set[str]:
        """Which of these item ids the base holds."""
        if not ids or not self._opened():
            return set()
        quoted = ", ".join(sql_quote(i) for i in dict.fromkeys(ids))
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
        self, query: str, k: int = 5, task: str | None = None, min_score: float | None = None,
        statuses: tuple[str, ...] | None = RETRIEVED,
    ) -> list[tuple[CognitionItem, float]]:
        """The ``k`` items nearest in meaning to ``query``, best first, with cosine similarity:
        of these review ``statuses`` and no refuted lesson (None: every item)."""
        if not self._opened():
            return []
        return self.search_vector(self.query_vector(query), k, task, min_score, statuses)

    def search_vector(
        self, vector: np.ndarray, k: int = 5, task: str | None = None, min_score: float | None = None,
        statuses: tuple[str, ...] | None = RETRIEVED,
    ) -> list[tuple[CognitionItem, float]]:
        """Like ``search``, for a query already embedded by this base's embedder; the same search
        of an unchanged table is answered from memory (a new list each time)."""
        if k < 1 or not self._opened():
            return []
        vector = np.asarray(vector, dtype=np.float32)
        version = self.version()
        key = (vector.tobytes(), k, task, min_score, statuses, version)
        return list(self.search_memo.get(
            key, lambda: self._search(vector, k, task, min_score, statuses, version)))

    def _search(self, vector: np.ndarray, k: int, task: str | None, min_score: float | None,
                statuses: tuple[str, ...] | None, version: int | None) -> list[tuple[CognitionItem, float]]:
        snapshot = self._small_snapshot(version)
        if snapshot is not None:  # a small table: the same exact search, in memory
            found = snapshot.nearest(vector, k, task, retrievable_row(statuses))
            hits = [(item_of(row), score) for row, score in found]
        else:
            query = self._table.search(vector, vector_column_name="vector")
            query = query.distance_type("cosine").select([*FIELDS, "_distance"]).limit(k)
            where = [f"(task IS NULL OR task = {sql_quote(task)})" if task is not None else "",
                     retrievable_where(statuses) or ""]
            if any(where):
                query = query.where(" AND ".join(filter(None, where)), prefilter=True)
            hits = [(item_of(row), 1.0 - float(row["_distance"])) for row in query.to_list()]
        seen: set[str] = set()  # rows of one id (writers at a URI, unlocked): the first stands for all
        hits = [hit for hit in hits if not (hit[0].id in seen or seen.add(hit[0].id))]
        return [hit for hit in hits if min_score is None or hit[1] >= min_score]

    def _small_snapshot(self, version: int | None) -> TableSnapshot | None:
        """The table's rows at `version` when it has at most SMALL_ROWS of them, read once per
        version (a write landing during the read makes them newer than their key, never older)."""
        held = self._snapshot
        if held is not None and held[0] == version:
            return held[1]
        snapshot = None
        if self._table.count_rows() <= SMALL_ROWS:
            rows = self._table.to_arrow().select([*FIELDS, "vector"]).to_pylist()
            snapshot = TableSnapshot.of(rows, self._dim or 0)
        if version is not None:
            self._snapshot = (version, snapshot)
        return snapshot

    def list(self, task: str | None = None, status: str | None = None) -> list[CognitionItem]:
        """Every item (of ``task`` and task-less ones, when given; of this review ``status``, when
        given), oldest first."""
        where = [f"(task IS NULL OR task = {sql_quote(task)})" if task is not None else "",
                 f"status = {sql_quote(status)}" if status is not None else ""]
        rows = self._rows(" AND ".join(filter(None, where)) or None)
        return sorted({row["id"]: item_of(row) for row in rows}.values(), key=lambda i: (i.created_at, i.id))

    def get(self, item_id: str) -> CognitionItem | None:
        """The item with this id, or None."""
        rows = self._rows(f"id = {sql_quote(item_id)}", limit=1)
        return item_of(rows[0]) if rows else None

    def origins_of(self, item_id: str) -> list[Origin]:
        """Every arrival of the item: the runs, tasks and people it came from, oldest first."""
        return self.origins.of(item_id)

    def set_status(self, item_id: str, status: str) -> bool:
        """Set the item's review status (pending, accepted, rejected); False when there is no such item."""
        if status not in STATUSES:
            raise CognitionError(f"unknown review status '{status}' (one of {', '.join(STATUSES)})")
        with self.lock.held():
            if not self._opened() or not self._table.count_rows(f"id = {sql_quote(item_id)}"):
                return False
            self._table.update(where=f"id = {sql_quote(item_id)}", values={"status": status})
        return True

    def replace(self, item: CognitionItem) -> None:
        """Rewrite the stored item of `item.id` with `item`'s fields (a reviewer's edit), re-embedded."""
        vector = self._vectors([item.embedding_text()])
        with self.lock.held():
            if self.get(item.id) is None:
                raise CognitionError(f"no cognition item with id '{item.id}' in {self.folder}")
            self._table.delete(f"id = {sql_quote(item.id)}")
            self._insert([item], vector)

    def remove(self, item_id: str) -> bool:
        """Delete the item with this id; False when there was none."""
        with self.lock.held():
            if not self._opened() or not self._table.count_rows(f"id = {sql_quote(item_id)}"):
                return False
            self._table.delete(f"id = {sql_quote(item_id)}")
        return True

    def count(self) -> int:
        """How many items the base holds."""
        return self._table.count_rows() if self._opened() else 0
