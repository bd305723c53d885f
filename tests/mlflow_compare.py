"""Helpers to compare MLflow runs written by ``evoforge.infra.mlflow_bulk`` with per-call ones.

- :class:`Store`: a fresh sqlite tracking store in a temp dir, with an experiment and a parent run.
- :func:`make_candidate`/:func:`make_candidates`: realistic evolution candidates (params, metrics,
  tags, the text artifacts named in :data:`TEXT_NAMES`) as plain dicts.
- :func:`per_call_write`: a candidate written the per-call way (``create_run``, ``log_batch``, one
  artifact upload, ``set_terminated``), as evoforge's tracker wrote it before the bulk path;
  :func:`record_of`: the same candidate as a :class:`RunRecord` for ``write_runs``.
- :func:`make_spans`: the 2 LLM traces (one root span each) of a candidate, to link to runs.
- :func:`run_view`, :func:`db_rows`, :func:`diff`: what a reader sees of a run and the raw rows
  MLflow stored for it (ids and times normalized), and the differences between two of them.

The store, the candidates, the per-call writer and the spans are bench/mlflow_bulk.py's (the
benchmark measures the same writes these tests compare).
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from bench.mlflow_bulk import (  # noqa: F401  (re-exported for the tests)
    Store,
    make_candidate,
    make_candidates,
    make_spans,
    per_call_write,
    record_of,
)

TEXT_NAMES = ("program.py", "diff.txt", "motivation.md", "error.txt", "analysis.md",
              "param_trials.json")
"""The text artifacts of every candidate :func:`make_candidate` makes."""


# ---- comparing runs -----------------------------------------------------------------------------

def run_view(client: MlflowClient, run_id: str, parent: str) -> dict[str, Any]:
    """What a reader (``get_run``, ``get_metric_history``, ``list_artifacts`` and the artifacts'
    texts) sees of a run; its id and its parent's id replaced by ``<run>``/``<parent>``, times
    reduced to whether they are set."""
    run = client.get_run(run_id)
    info, data = run.info, run.data

    def norm(s: str) -> str:
        return s.replace(run_id, "<run>").replace(parent, "<parent>")

    def listing(path: str | None = None) -> list[tuple[str, bool, int | None, str | None]]:
        out = []
        for f in client.list_artifacts(run_id, path):
            if f.is_dir:
                out.append((f.path, True, None, None))
                out.extend(listing(f.path))
            else:
                with tempfile.TemporaryDirectory(prefix="mlflow-compare-dl-") as dst:
                    local = client.download_artifacts(run_id, f.path, dst_path=dst)
                    text = Path(local).read_text(encoding="utf-8")
                out.append((f.path, False, f.file_size, text))
        return out

    history = {k: [(m.key, m.value, m.step, m.timestamp > 0)
                   for m in client.get_metric_history(run_id, k)] for k in data.metrics}
    return {
        "info.run_name": info.run_name, "info.status": info.status,
        "info.lifecycle_stage": info.lifecycle_stage, "info.user_id": info.user_id,
        "info.experiment_id": info.experiment_id,
        "info.artifact_uri": norm(info.artifact_uri),
        "info.start_time present": info.start_time is not None and info.start_time > 0,
        "info.end_time present": info.end_time is not None and info.end_time >= info.start_time,
        "data.params": data.params, "data.metrics": data.metrics,
        "data.tags": {k: norm(v) for k, v in data.tags.items()},
        "inputs": [str(d) for d in run.inputs.dataset_inputs] if run.inputs else [],
        "metric history": history,
        "artifacts": listing(),
    }


def db_rows(uri: str, run_id: str, parent: str) -> dict[str, list]:
    """The rows of the run in every table of the sqlite store ``uri`` that has a ``run_uuid``
    column, sorted; the run's and its parent's id replaced by ``<run>``/``<parent>``, set
    times by ``<t>``."""
    blank = {"start_time", "end_time", "timestamp"}
    con = sqlite3.connect(uri.removeprefix("sqlite:///"))
    try:
        out = {}
        for (table,) in con.execute("select name from sqlite_master where type='table'"):
            cols = [r[1] for r in con.execute(f"pragma table_info('{table}')")]
            if "run_uuid" not in cols:
                continue
            rows = con.execute(f"select * from '{table}' where run_uuid=?", (run_id,)).fetchall()
            out[table] = sorted(
                tuple("<t>" if c in blank and v else
                      (v.replace(run_id, "<run>").replace(parent, "<parent>")
                       if isinstance(v, str) else v) for c, v in zip(cols, row, strict=True))
                for row in rows)
    finally:
        con.close()
    return out


def diff(per_call: Any, bulk: Any, path: str = "") -> list[str]:
    """The differences between two views (:func:`run_view`, :func:`db_rows`), one line each
    (``<key path>: ...``); empty if they are equal."""
    if isinstance(per_call, dict) and isinstance(bulk, dict):
        out = []
        for k in sorted(set(per_call) | set(bulk), key=str):
            if k not in per_call:
                out.append(f"{path}{k}: only in bulk: {bulk[k]!r}")
            elif k not in bulk:
                out.append(f"{path}{k}: only in per-call: {per_call[k]!r}")
            else:
                out.extend(diff(per_call[k], bulk[k], f"{path}{k}."))
        return out
    return [] if per_call == bulk else [f"{path.rstrip('.')}: per-call {per_call!r} != bulk {bulk!r}"]
