"""The learn stage's retrieval is done once per distinct query while the cognition bases are
unchanged, and again as soon as either base changes (its own writes or another process's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evoforge.cognition import CognitionBase, CognitionItem, LexicalEmbedder
from evoforge.stages.learn import retrieve

TASK = "circle_packing"


class CountingEmbedder(LexicalEmbedder):
    """The lexical embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return super().embed(texts)


def _count_searches(base: CognitionBase, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the searches that reach the base's LanceDB table."""
    calls: list[int] = []
    real = base._search

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(base, "_search", counted)
    return calls


@pytest.fixture
def bases(tmp_path: Path) -> tuple[CognitionBase, CognitionBase, CountingEmbedder]:
    embedder = CountingEmbedder()
    shared = CognitionBase(tmp_path / "shared", embedder)
    shared.add([CognitionItem.create("Corners", "Put bigger circles in the corners."),
                CognitionItem.create("Rings", "Arrange circles in concentric rings.")])
    run_base = CognitionBase(tmp_path / "run", embedder)
    run_base.add([CognitionItem.create("Hex", "A hexagonal grid packs circles densely.")])
    embedder.texts.clear()
    return shared, run_base, embedder


def test_same_query_unchanged_base_embeds_and_searches_once(bases, monkeypatch):
    shared, run_base, embedder = bases
    shared_searches = _count_searches(shared, monkeypatch)
    run_searches = _count_searches(run_base, monkeypatch)
    query = "bigger circles in the corners"
    first = retrieve(shared, run_base, query, 3, TASK, 0.0)
    again = [retrieve(shared, run_base, query, 3, TASK, 0.0) for _ in range(4)]
    assert embedder.texts == [query]
    assert len(shared_searches) == 1 and len(run_searches) == 1
    assert all(found == first for found in again)
    assert [shown.title for shown in first][0] == "Corners"
    assert shared.search_memo.hits == 4 and shared.vector_memo.hits == 4


def test_a_changed_base_is_searched_again(bases, monkeypatch, tmp_path):
    shared, run_base, embedder = bases
    shared_searches = _count_searches(shared, monkeypatch)
    run_searches = _count_searches(run_base, monkeypatch)
    query = "circles packed in a hexagonal grid"
    before = retrieve(shared, run_base, query, 5, TASK, 0.0)
    # another process (here: another connection) writes to the shared base
    CognitionBase(tmp_path / "shared", LexicalEmbedder()).add(
        [CognitionItem.create("Hex rows", "Shift every other row of circles: a hexagonal grid.")])
    after = retrieve(shared, run_base, query, 5, TASK, 0.0)
    assert len(shared_searches) == 2 and len(run_searches) == 1  # the run's base did not change
    assert embedder.texts == [query]  # the query is still embedded once
    assert "Hex rows" not in [k.title for k in before] and "Hex rows" in [k.title for k in after]
    run_base.add([CognitionItem.create("Lesson", "Circles in a hexagonal grid scored best.")])
    latest = retrieve(shared, run_base, query, 5, TASK, 0.0)
    assert len(shared_searches) == 2 and len(run_searches) == 2
    assert "Lesson" in [k.title for k in latest]


def test_a_distinct_query_is_embedded_and_searched(bases, monkeypatch):
    shared, run_base, embedder = bases
    shared_searches = _count_searches(shared, monkeypatch)
    retrieve(shared, run_base, "corners", 3, TASK, 0.0)
    retrieve(shared, run_base, "rings", 3, TASK, 0.0)
    retrieve(shared, run_base, "corners", 2, TASK, 0.0)  # another k: another search, same vector
    assert embedder.texts == ["corners", "rings"]
    assert len(shared_searches) == 3


def test_the_cached_result_is_a_new_list(bases):
    shared, run_base, _ = bases
    first = shared.search("corners", k=2, task=TASK)
    first.clear()
    assert len(shared.search("corners", k=2, task=TASK)) == 2


def test_no_table_in_either_base_embeds_nothing(tmp_path):
    embedder = CountingEmbedder()
    empty, empty_run = CognitionBase(tmp_path / "a", embedder), CognitionBase(tmp_path / "b", embedder)
    assert retrieve(empty, empty_run, "anything", 3, TASK, 0.0) == []
    assert retrieve(empty, None, "anything", 3, TASK, 0.0) == []
    assert embedder.texts == []
    CognitionBase(tmp_path / "b", LexicalEmbedder()).add([CognitionItem.create("New", "anything at all")])
    assert [k.title for k in retrieve(empty, empty_run, "anything", 3, TASK, 0.0)] == ["New"]
    assert embedder.texts == ["anything"]
