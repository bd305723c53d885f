"""A small cognition base is searched in memory, with LanceDB's answers, read once per version."""

from __future__ import annotations

from pathlib import Path

import pytest

import evoforge.cognition.store as store_module
from evoforge.cognition import CognitionBase, CognitionItem, LexicalEmbedder
from evoforge.cognition.store import RETRIEVED

WORDS = ["circle", "ring", "corner", "grid", "hexagon", "row", "column", "radius", "pack", "shift",
         "grow", "shrink", "edge", "centre"]
QUERIES = ["bigger circles in the corners", "a hexagon grid of rows", "shrink the centre radius",
           "nothing alike at all", "edge"]


def _base(folder: Path) -> CognitionBase:
    base = CognitionBase(folder, LexicalEmbedder())
    items = []
    for i in range(60):
        words = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(5))
        items.append(CognitionItem.create(f"item {i}", f"{words} number {i}",
                                          task=("packing", "other", None)[i % 3],
                                          status=("accepted", "pending", "accepted", "rejected")[i % 4],
                                          verdict=("", "confirmed", "refuted", "unchecked", "")[i % 5]))
    base.add(items)
    return base


@pytest.mark.parametrize("statuses", [RETRIEVED, None])
@pytest.mark.parametrize("task", [None, "packing", "other"])
def test_in_memory_search_gives_lancedb_answers(tmp_path, monkeypatch, task, statuses):
    base = _base(tmp_path / "base")
    for query in QUERIES:
        vector = base.query_vector(query)
        version = base.version()
        memory = base._search(vector, 7, task, None, statuses, version)
        with monkeypatch.context() as patch:
            patch.setattr(store_module, "SMALL_ROWS", 0)  # every table is too big: LanceDB searches
            patch.setattr(base, "_snapshot", None)
            lance = base._search(vector, 7, task, None, statuses, version)
        assert base._snapshot is not None and base._snapshot[1] is not None  # the memory path ran
        assert [item.id for item, _ in memory] == [item.id for item, _ in lance]
        assert [s for _, s in memory] == pytest.approx([s for _, s in lance], abs=1e-5)
        assert all(item.task in (None, task) for item, _ in memory if task is not None)
        assert len(memory) == 7
        if statuses is not None:  # only accepted items that rest on no refuted claim
            assert {(item.status, item.verdict != "refuted") for item, _ in memory} == {("accepted", True)}


def test_min_score_and_k_apply_in_memory(tmp_path):
    base = _base(tmp_path / "base")
    found = base.search("a hexagon grid of rows", k=3, min_score=0.2)
    assert len(found) <= 3 and all(score >= 0.2 for _, score in found)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


def test_the_table_is_read_once_per_version(tmp_path, monkeypatch):
    base = _base(tmp_path / "base")
    reads: list[int] = []
    real = base._table.to_arrow

    def counted():
        reads.append(1)
        return real()

    monkeypatch.setattr(base._table, "to_arrow", counted)
    for query in QUERIES:
        base.search(query, k=2)
    assert len(reads) == 1
    CognitionBase(tmp_path / "base", LexicalEmbedder()).add([CognitionItem.create("new", "brand new words")])
    assert [item.title for item, _ in base.search("brand new words", k=1)] == ["new"]
    assert len(reads) == 2


def test_a_big_table_is_searched_by_lancedb(tmp_path, monkeypatch):
    base = _base(tmp_path / "base")
    monkeypatch.setattr(store_module, "SMALL_ROWS", 10)
    found = base.search("bigger circles in the corners", k=4)
    assert len(found) == 4
    assert base._snapshot is not None and base._snapshot[1] is None  # no rows held in memory
