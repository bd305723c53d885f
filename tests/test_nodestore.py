"""The DuckDB node database: round trips, atomic group writes, and one writer at a time."""

from __future__ import annotations

import subprocess
import sys
import time

import duckdb
import pytest

from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.infra.nodestore import NodeStore, StoreBusyError
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.research_data import ResearchData


def _node(node_id: str, score: float | None, status: str = EVALUATED, **kw) -> Node:
    return Node(id=node_id, run_id="r", code=f"x = {score}", score_full=score, status=status,
                evaluated_at=1.0 if status == EVALUATED else None, **kw)


def test_round_trip_keeps_every_field(tmp_path):
    node = _node("a", 1.5, metrics={"m": 2.0}, case_scores={"3": 0.5}, artifacts={"k": "v"},
                 owned={"research": ResearchData(inspiration_ids=["b"], inspirations_used=["b"]),
                        "staleness": StalenessData(note="guarded: passed")})
    with NodeStore(tmp_path / "n.duckdb") as store:
        store.put(node)
        assert store.get("a") == node


def test_best_and_counts(tmp_path):
    with NodeStore(tmp_path / "n.duckdb") as store:
        store.write([_node("a", 1.0), _node("b", 3.0), _node("c", None, FAILED)], {})
        assert store.best().id == "b" and store.best(maximize=False).id == "a"
        assert store.evaluations() == 2 and store.count() == 3


def test_a_group_write_is_all_or_nothing(tmp_path):
    with NodeStore(tmp_path / "n.duckdb") as store:
        store.write([_node("a", 1.0)], {"v": 1})
        bad = _node("b", 2.0)
        bad.generation = "not a number"  # type: ignore[assignment]
        with pytest.raises(duckdb.Error):
            store.write([_node("c", 3.0), bad], {"v": 2})
        assert store.get("c") is None and store.get_meta("v") == 1


def test_a_second_process_cannot_open_a_held_database(tmp_path):
    path = tmp_path / "n.duckdb"
    NodeStore(path).close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from evoforge.infra.nodestore import NodeStore; "
        f"s = NodeStore({str(path)!r}); print('held', flush=True); time.sleep(30)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreBusyError, match="running evoforge process"):
            NodeStore(path, read_only=True)
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    NodeStore(path, read_only=True).close()  # free again once the holder is gone
