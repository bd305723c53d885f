"""``evoforge.infra.mlflow_bulk.write_runs`` writes what the per-call MlflowClient path writes.

On a fresh sqlite store (tests/mlflow_compare.py) it checks that a run written in bulk:

- reads the same (``get_run``, metric history, artifacts and their texts) and has the same raw
  rows as one written per call (``create_run``/``log_batch``/``log_artifacts``/
  ``set_terminated``), ids and times aside; ``search_runs`` and the metric history find it;
- follows MLflow's rules: params cut to 6000 characters, tags to 8000, non-finite or
  non-numeric metrics skipped, run name and user id as ``create_run`` sets them;
- nests ``children`` under their record and links ``trace_ids`` as ``link_traces_to_run`` does;
- is written with its whole batch or not at all: an invalid record, a pre-chosen id that exists
  or a database error leaves no row and no new artifact folder;
- falls back to the per-call path (same result) when the store is not a plain SQL store or
  MLflow's tables have other columns than the module knows.
"""

from __future__ import annotations

import random
import sqlite3
import uuid

import pytest
from mlflow.exceptions import MlflowException
from mlflow.store.tracking.dbmodels.models import SqlRun
from mlflow.tracking._tracking_service.utils import _get_store

from evoforge.infra import mlflow_bulk
from evoforge.infra.mlflow_bulk import RunRecord, new_run_id, write_runs
from tests.mlflow_compare import (
    TEXT_NAMES,
    Store,
    db_rows,
    diff,
    make_candidate,
    make_candidates,
    make_spans,
    per_call_write,
    record_of,
    run_view,
)


@pytest.fixture
def store(monkeypatch):
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    s = Store()
    yield s
    s.close()


def _both_ways(store: Store, cand: dict) -> tuple[str, str]:
    """``cand`` written per call and in bulk: the two run ids."""
    a = per_call_write(store.client, store.uri, store.exp_id, store.parent, cand)
    [b] = write_runs(store.uri, store.exp_id, [record_of(cand, store.parent)])
    return a, b


def _assert_same(store: Store, per_call: str, bulk: str) -> None:
    """The two runs read the same and have the same raw rows (ids and times aside)."""
    view_diff = diff(run_view(store.client, per_call, store.parent),
                     run_view(store.client, bulk, store.parent))
    row_diff = diff(db_rows(store.uri, per_call, store.parent),
                    db_rows(store.uri, bulk, store.parent))
    assert view_diff == [] and row_diff == []


@pytest.mark.parametrize("failed", [False, True], ids=["finished", "failed"])
def test_bulk_run_reads_and_stores_like_per_call_run(store, failed):
    cand = make_candidate(3, random.Random(1), failed=failed)
    a, b = _both_ways(store, cand)
    _assert_same(store, a, b)
    run = store.client.get_run(b)
    assert run.info.status == ("FAILED" if failed else "FINISHED")
    assert run.info.run_name == cand["name"]
    assert run.info.start_time > 0 and run.info.end_time >= run.info.start_time
    assert run.data.tags["mlflow.parentRunId"] == store.parent
    assert run.data.tags["mlflow.runName"] == cand["name"]
    assert sorted(f.path for f in store.client.list_artifacts(b)) == sorted(TEXT_NAMES)


def test_bulk_runs_found_by_search_runs_and_metric_history(store):
    cands = make_candidates(7)
    ids = write_runs(store.uri, store.exp_id, [record_of(c, store.parent) for c in cands])
    found = store.client.search_runs(
        [store.exp_id], filter_string=f"tags.mlflow.parentRunId = '{store.parent}'",
        order_by=["metrics.combined_score DESC"])
    assert {r.info.run_id for r in found} == set(ids)
    scores = [r.data.metrics["combined_score"] for r in found]
    assert scores == sorted(scores, reverse=True)
    hist = store.client.get_metric_history(ids[0], "combined_score")
    assert [(m.value, m.step) for m in hist] == [(cands[0]["metrics"]["combined_score"], 0)]
    failed = store.client.search_runs([store.exp_id], filter_string="attributes.status = 'FAILED'")
    assert {r.info.run_name for r in failed} == {c["name"] for c in cands if c["status"] == "FAILED"}


def test_long_values_cut_and_bad_metrics_skipped_as_mlflow_does(store):
    cand = make_candidate(1, random.Random(2))
    cand["params"]["long"] = "p" * 7000
    cand["tags"]["long_tag"] = "t" * 9000  # MLflow's set_tag/log_batch cut tags to 8000
    metrics = dict(cand["metrics"], nan=float("nan"), inf=float("-inf"), text="x", none=None)
    [b] = write_runs(store.uri, store.exp_id, [record_of({**cand, "metrics": metrics}, store.parent)])
    run = store.client.get_run(b)
    assert run.data.params["long"] == "p" * 6000
    assert run.data.tags["long_tag"] == "t" * 8000
    assert set(run.data.metrics) == set(cand["metrics"])
    a = per_call_write(store.client, store.uri, store.exp_id, store.parent,
                       {**cand, "tags": {**cand["tags"], "long_tag": "t" * 8000}})
    _assert_same(store, a, b)


@pytest.mark.parametrize("bad", [
    {"tags": {"bad key!": "v"}},
    {"params": {"../escape": 1}},
    {"metrics": {"bad|metric": 1.0}},
    {"status": "WHATEVER"},
    {"name": "a", "tags": {"mlflow.runName": "b"}},
    {"texts": {"../outside.txt": "x"}},
], ids=["bad-tag-key", "bad-param-key", "bad-metric-key", "bad-status", "name-vs-name-tag",
        "text-outside-run"])
def test_invalid_record_fails_whole_batch_leaving_no_run_or_folder(store, bad):
    good = record_of(make_candidate(1, random.Random(3)), store.parent)
    bad_rec = RunRecord(**{"name": "bad", "parent_run_id": store.parent, **bad})
    with pytest.raises(MlflowException):
        write_runs(store.uri, store.exp_id, [good, bad_rec])
    assert store.client.search_runs([store.exp_id],
                                    filter_string="attributes.run_name != 'parent'") == []
    assert list(store.artifact_root.iterdir()) == []  # no orphaned artifact folders


def test_existing_run_id_or_db_error_fails_batch_and_removes_its_new_folders(store, monkeypatch):
    rid = new_run_id()
    write_runs(store.uri, store.exp_id, [RunRecord("first", store.parent, run_id=rid,
                                                   texts={"a.txt": "keep"})])
    again = RunRecord("dup", store.parent, run_id=rid, texts={"b.txt": "x"})
    fresh = RunRecord("fresh", store.parent, texts={"c.txt": "y"})
    with pytest.raises(MlflowException, match="exist already"):
        write_runs(store.uri, store.exp_id, [fresh, again])
    assert [f.path for f in store.client.list_artifacts(rid)] == ["a.txt"]  # untouched
    assert [p.name for p in store.artifact_root.iterdir()] == [rid]
    # a failure inside the transaction removes the folders the batch made
    other = RunRecord("other", store.parent, texts={"d.txt": "z"})
    clash = RunRecord("clash", store.parent, texts={"e.txt": "w"})
    orig = mlflow_bulk._prepare

    def prepare_then_clash(record, *args):
        rows = orig(record, *args)
        if record is clash:
            rows["run"]["run_uuid"] = rid  # collides on the runs primary key at insert time
        return rows

    monkeypatch.setattr(mlflow_bulk, "_prepare", prepare_then_clash)
    with pytest.raises(MlflowException, match="UNIQUE|unique|duplicate"):
        write_runs(store.uri, store.exp_id, [other, clash])
    assert [p.name for p in store.artifact_root.iterdir()] == [rid]
    assert store.client.search_runs([store.exp_id],
                                    filter_string="attributes.run_name = 'other'") == []


def test_run_name_and_user_id_follow_create_run_rules(store):
    ids = write_runs(store.uri, store.exp_id, [
        RunRecord("", store.parent),  # random name, as create_run
        RunRecord("", store.parent, tags={"mlflow.runName": "from-tag"}),
        RunRecord("same", store.parent, tags={"mlflow.runName": "same", "mlflow.user": "ann"}),
    ])
    r0, r1, r2 = (store.client.get_run(i) for i in ids)
    assert r0.info.run_name and r0.data.tags["mlflow.runName"] == r0.info.run_name
    assert r1.info.run_name == "from-tag"
    assert r2.info.run_name == "same" and r2.info.user_id == "ann"
    assert r0.info.user_id == "unknown"  # MlflowClient.create_run's default; no mlflow.user tag
    assert "mlflow.user" not in r0.data.tags
    per_call = store.client.create_run(store.exp_id, run_name="x",
                                       tags={"mlflow.user": "ann", "mlflow.parentRunId": "p"})
    assert per_call.info.user_id == "ann"  # the rule the bulk path copies


def test_children_are_nested_under_their_record(store):
    child = RunRecord("trial-0", params={"lr": 0.1}, metrics={"value": 1.0}, status="FAILED")
    grandchild = RunRecord("sub", metrics={"v": 2})
    child.children.append(grandchild)
    top = RunRecord("cand", store.parent, metrics={"score": 3.0},
                    children=[child, RunRecord("trial-1")])
    [tid] = write_runs(store.uri, store.exp_id, [top])
    under_top = store.client.search_runs(
        [store.exp_id], filter_string=f"tags.mlflow.parentRunId = '{tid}'")
    assert sorted(r.info.run_name for r in under_top) == ["trial-0", "trial-1"]
    assert store.client.get_run(grandchild.run_id).data.tags["mlflow.parentRunId"] == child.run_id
    assert store.client.get_run(child.run_id).info.status == "FAILED"
    assert store.client.get_run(tid).data.tags["mlflow.parentRunId"] == store.parent


def test_trace_ids_linked_like_link_traces_to_run(store):
    spans_a = make_spans(0, "n0")
    spans_b = make_spans(1, "n1")
    store.tracing.log_spans(store.exp_id, spans_a + spans_b)
    a = store.client.create_run(store.exp_id, run_name="a").info.run_id
    store.client.link_traces_to_run([s.trace_id for s in spans_a], a)
    [b] = write_runs(store.uri, store.exp_id,
                     [RunRecord("b", store.parent, trace_ids=[s.trace_id for s in spans_b])])
    for rid, spans in ((a, spans_a), (b, spans_b)):
        found = store.client.search_traces(locations=[store.exp_id], run_id=rid)
        assert {t.info.trace_id for t in found} == {s.trace_id for s in spans}
    con = sqlite3.connect(store.uri.removeprefix("sqlite:///"))
    try:
        kinds = {rid: con.execute("select distinct source_type, destination_type from "
                                  "entity_associations where destination_id = ?", (rid,)).fetchall()
                 for rid in (a, b)}
    finally:
        con.close()
    assert kinds[a] == kinds[b] == [("trace", "run")]


def test_unsupported_store_falls_back_to_per_call_with_same_result(store, monkeypatch):
    cand = make_candidate(5, random.Random(4))
    [bulk] = write_runs(store.uri, store.exp_id, [record_of(cand, store.parent)])
    monkeypatch.setattr(mlflow_bulk, "bulk_supported", lambda s: False)
    called = []
    real = mlflow_bulk._write_runs_per_call
    monkeypatch.setattr(mlflow_bulk, "_write_runs_per_call",
                        lambda *args: called.append(1) or real(*args))
    [per_call] = write_runs(store.uri, store.exp_id, [record_of(cand, store.parent)])
    assert called == [1]
    _assert_same(store, per_call, bulk)


def test_bulk_disabled_when_table_columns_change_or_store_not_sql(store, monkeypatch):
    assert mlflow_bulk.bulk_supported(_get_store(store.uri))
    cols = dict(mlflow_bulk._COLUMNS)
    cols[SqlRun] = cols[SqlRun] | {"a_new_column"}
    monkeypatch.setattr(mlflow_bulk, "_COLUMNS", cols)
    assert not mlflow_bulk.bulk_supported(_get_store(store.uri))
    assert not mlflow_bulk.bulk_supported(object())


def test_pre_chosen_run_id_is_used_and_empty_batch_writes_nothing(store):
    rid = uuid.uuid4().hex
    assert write_runs(store.uri, store.exp_id, []) == []
    assert store.client.search_runs([store.exp_id], filter_string="attributes.run_name != 'parent'") == []
    assert write_runs(store.uri, store.exp_id, [RunRecord("x", store.parent, run_id=rid)]) == [rid]
    assert store.client.get_run(rid).info.run_name == "x"
