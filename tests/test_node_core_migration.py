"""A node database written before the built-in stages' fields moved off the node (a real one, in
tests/fixtures/node_db_v1) opens with each value under its stage's data, and its run resumes."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from evoforge.flows.cli import main
from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.judge_data import JudgeData
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.population.stats import RunStats
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.reflect_data import ReflectData, ReflectOutcome
from evoforge.stages.research_data import ResearchData
from evoforge.stages.rounds.plan_data import PlanData
from tests.helpers import read_nodes, read_status

FIXTURE = Path(__file__).parent / "fixtures" / "node_db_v1" / "nodes.duckdb.gz"
# the old column -> how the new code reads it
MOVED = {
    "inspiration_ids": lambda n: ResearchData.peek(n).inspiration_ids,
    "inspirations_used": lambda n: ResearchData.peek(n).inspirations_used,
    "prompt_dropped": lambda n: ResearchData.peek(n).prompt_dropped,
    "ideas_used": lambda n: ResearchData.peek(n).ideas_used,
    "score_default": lambda n: EngineerData.peek(n).score_default,
    "hardcoded": lambda n: EngineerData.peek(n).hardcoded,
    "promoted_round": lambda n: PromotionData.peek(n).round,
    "judge_score": lambda n: JudgeData.peek(n).score,
    "repeat_of": lambda n: RepeatData.peek(n).repeat_of,
    "staleness": lambda n: StalenessData.peek(n).staleness,
    "reflection": lambda n: StalenessData.peek(n).note,
    "analysis": lambda n: AnalysisData.peek(n).report,
    "lessons": lambda n: AnalysisData.peek(n).lessons,
    "branch": lambda n: PlanData.peek(n).branch,
}
_EMPTY: tuple[Any, ...] = (None, [], "", 0)


def _old_db(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nodes.duckdb"
    with gzip.open(FIXTURE) as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    return path


def _raw(path: Path, columns: list[str]) -> dict[str, dict[str, Any]]:
    """Each node's values of `columns` as the old version wrote them (JSON text decoded)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(f"SELECT id, {', '.join(columns)} FROM nodes").fetchall()
    finally:
        con.close()
    out = {}
    for node_id, *values in rows:
        out[node_id] = {c: json.loads(v) if isinstance(v, str) and v[:1] in ("[", "{") else v
                        for c, v in zip(columns, values, strict=True)}
    return out


def _columns(path: Path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {r[0] for r in con.execute("DESCRIBE node_rows").fetchall()}
    finally:
        con.close()


def test_the_fixture_is_an_old_database_with_values_in_the_moved_columns(tmp_path):
    path = _old_db(tmp_path)
    assert set(MOVED) <= _columns(path)
    raw = _raw(path, ["promoted_round", "repeat_of", "score_default"])
    assert sum(r["promoted_round"] is not None for r in raw.values()) == 7
    assert sum(r["repeat_of"] is not None for r in raw.values()) == 45
    assert sum(r["score_default"] is not None for r in raw.values()) == 12


def test_opening_moves_each_old_column_into_its_owners_data_and_drops_it(tmp_path):
    path = _old_db(tmp_path)
    raw = _raw(path, [*MOVED, "params", "score_pilot"])
    with NodeStore(path) as store:
        nodes = {n.id: n for n in store.all()}
    assert set(nodes) == set(raw) and len(nodes) == 57
    moved = 0
    for node_id, old in raw.items():
        node = nodes[node_id]
        for column, read in MOVED.items():
            assert read(node) == (old[column] if old[column] is not None else read(Node("x", "r", ""))), (
                node_id, column)
            moved += old[column] not in _EMPTY
        # an empty old value leaves no owner's entry behind; the core fields are as they were
        assert node.params == old["params"]
        assert node.score_pilot == old["score_pilot"]
        assert "judge" not in node.owned and "research" not in node.owned  # all empty in this run
    assert moved == 7 + 45 + 12 + 2 + 56 + 11 + 56  # promoted, repeats, defaults, stale, noted,
    # analysed, drawn for a plan branch
    assert not set(MOVED) & _columns(path)


def test_opening_twice_changes_nothing_more(tmp_path):
    path = _old_db(tmp_path)
    with NodeStore(path) as store:
        first = store.all()
    with NodeStore(path) as store:
        again = store.all()
        rows = store._con.execute("SELECT count(*) FROM node_rows").fetchone()[0]
    assert again == first and rows == len(first)


def test_a_reader_of_an_old_file_sees_the_values_under_their_owners_and_leaves_the_file(tmp_path):
    path = _old_db(tmp_path)
    raw = _raw(path, ["promoted_round"])
    with NodeStore(path, read_only=True) as store:
        nodes = store.all()
    assert {n.id: PromotionData.peek(n).round for n in nodes} == {
        i: r["promoted_round"] for i, r in raw.items()}
    assert set(MOVED) <= _columns(path)  # a reader does not change the file


def test_an_old_reflection_note_becomes_its_typed_outcome_and_is_counted(tmp_path):
    path = _old_db(tmp_path)
    con = duckdb.connect(str(path))
    ids = [r[0] for r in con.execute("SELECT id FROM nodes WHERE status = 'evaluated' ORDER BY id "
                                     "LIMIT 3").fetchall()]
    notes = ["reflective: staleness 2, similarity 0.10; reflection: patched onto abc",
             "reflective: staleness 2, similarity 0.10; reflection: kept",
             "reflective: staleness 2, similarity 0.10; reflection call failed (HTTP 500): kept"]
    for node_id, note in zip(ids, notes, strict=True):  # as the old reflect stage wrote them
        con.execute("UPDATE node_rows SET reflection = ? WHERE id = ?", [note, node_id])
    con.execute("UPDATE node_rows SET owned = ? WHERE id = ?",  # the old reflect stage's own data
                [json.dumps({"reflect": {"patched_from": "orig"}}), ids[0]])
    con.close()
    with NodeStore(path) as store:
        nodes = {n.id: n for n in store.all()}
    assert [ReflectData.peek(nodes[i]).outcome for i in ids] == [
        ReflectOutcome.PATCHED, ReflectOutcome.KEPT, ReflectOutcome.CALL_FAILED]
    assert ReflectData.peek(nodes[ids[0]]).patched_from == "orig"
    stats = RunStats.rebuild(list(nodes.values()))
    assert stats.reflected == 2 and stats.patched == 1
    assert stats.promotions == 7 and stats.repeats == 45


@pytest.mark.slow
def test_an_old_run_resumes_for_two_more_evaluations(tmp_path):
    run_dir = tmp_path / "run"
    path = _old_db(run_dir)
    before = {n: r["promoted_round"] for n, r in _raw(path, ["promoted_round"]).items()}
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"budget": {"max_proposals": 400},
                                  "param_search": {"trials": 2, "startup": 1}}))
    code = main(["run", "digits", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--config", str(config), "--max-evals", "14", "--no-mlflow", "--no-prefect-tasks",
                 "--staleness", "reflective", "--seed", "2", "--quiet"])
    assert code == 0
    nodes = read_nodes(run_dir)
    assert sum(n.was_evaluated for n in nodes) == 14  # 12 before, 2 in the resumed session
    assert read_status(run_dir)["evaluations"] == 14
    by_id = {n.id: n for n in nodes}
    promoted = {i: r for i, r in before.items() if r is not None}
    assert len(promoted) == 7 and {i: PromotionData.peek(by_id[i]).round for i in promoted} == promoted
    assert sum(RepeatData.peek(n).repeat_of is not None for n in nodes) >= 45
    assert not set(MOVED) & _columns(run_dir / "nodes.duckdb")
