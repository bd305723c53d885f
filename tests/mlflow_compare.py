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

bench/mlflow_bulk.py has its own copy of the candidate data and the per-call writer (a benchmark
must not import the tests).
"""

from __future__ import annotations

import json
import random
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, Span, SpanType
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.tracing.client import TracingClient
from mlflow.tracing.constant import SpanAttributeKey, TraceTagKey
from mlflow.tracing.utils import encode_span_id, generate_mlflow_trace_id_from_otel_trace_id
from mlflow.tracking import MlflowClient

from evoforge.infra.mlflow_bulk import RunRecord

TEXT_NAMES = ("program.py", "diff.txt", "motivation.md", "error.txt", "analysis.md",
              "param_trials.json")
"""The text artifacts of every candidate :func:`make_candidate` makes."""


class Store:
    """A fresh sqlite tracking store in a temp dir with an experiment and a parent run.

    Attributes:
        dir: The temp dir (``mlflow.db`` and the ``mlartifacts`` folder); removed by :meth:`close`.
        uri: The tracking URI (``sqlite:///...``).
        client: An ``MlflowClient`` on ``uri``.
        exp_id: The experiment (artifact location ``<dir>/mlartifacts``).
        parent: The id of a run (``parent``) the candidates' runs are nested under.
        tracing: A ``TracingClient`` on ``uri``.
    """

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="mlflow-compare-")
        root = Path(self.dir.name)
        self.uri = f"sqlite:///{root / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=self.uri)
        (root / "mlartifacts").mkdir()
        self.exp_id = self.client.create_experiment(
            "evoforge/compare", artifact_location=(root / "mlartifacts").as_uri())
        self.parent = self.client.create_run(self.exp_id, run_name="parent").info.run_id
        self.tracing = TracingClient(self.uri)

    @property
    def artifact_root(self) -> Path:
        """The experiment's artifact folder (one subfolder per run with artifacts)."""
        return Path(self.dir.name, "mlartifacts")

    def close(self) -> None:
        """Remove the temp dir."""
        self.dir.cleanup()


# ---- candidate data -----------------------------------------------------------------------------

def _text(rng: random.Random, size: int, line: str) -> str:
    """``size`` characters of lines starting with ``line``."""
    out, n = [], 0
    while n < size:
        s = f"{line} {rng.randrange(10**6)} = {rng.random():.6f}\n"
        out.append(s)
        n += len(s)
    return "".join(out)[:size]


def make_candidate(i: int, rng: random.Random, failed: bool = False) -> dict[str, Any]:
    """Candidate ``i``: name ``cand-<i>``, 15 params, 12 metrics (``combined_score`` among them),
    10 tags, the 6 text artifacts of :data:`TEXT_NAMES` (a 3 KB program), status FINISHED or
    FAILED."""
    params = {f"param_{k}": rng.choice([rng.random(), rng.randrange(1000), "adam", True])
              for k in range(13)}
    params["prompt_template"] = "x" * 400
    params["island"] = i % 4
    metrics = {f"metric_{k}": rng.random() * 100 for k in range(11)}
    metrics["combined_score"] = rng.random()
    tags = {"node_id": f"n{i:05d}", "generation": str(i // 10), "island": str(i % 4),
            "parent_node": f"n{max(i - 1, 0):05d}", "stage": "evaluate", "author": "llm",
            "model": "gpt-x", "operator": "diff", "task": "circle_packing", "seed": "42"}
    texts = {
        "program.py": _text(rng, 3000, "    value"),
        "diff.txt": _text(rng, 1200, "+ line"),
        "motivation.md": _text(rng, 600, "Because"),
        "error.txt": _text(rng, 300, "Traceback") if failed else "no error\n",
        "analysis.md": _text(rng, 1500, "- finding"),
        "param_trials.json": json.dumps([{"trial": t, "value": rng.random()} for t in range(20)]),
    }
    return {"name": f"cand-{i:05d}", "params": params, "metrics": metrics, "tags": tags,
            "texts": texts, "status": "FAILED" if failed else "FINISHED"}


def make_candidates(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` candidates (every 7th, from the 4th on, FAILED), reproducible from ``seed``."""
    rng = random.Random(seed)
    return [make_candidate(i, rng, failed=(i % 7 == 3)) for i in range(n)]


# ---- the two ways to write a candidate ----------------------------------------------------------

def per_call_write(client: MlflowClient, uri: str, exp_id: str, parent: str,
                   cand: dict[str, Any]) -> str:
    """Write ``cand`` nested under ``parent`` the per-call way; return its run id.

    ``create_run(tags={parentRunId, ...})``, ``log_batch(metrics, params)``, the non-empty texts
    staged in a temp dir and uploaded with one ``log_artifacts``, ``set_terminated(status)``. The
    metrics must all be finite numbers (the caller filters them, as evoforge's tracker did).
    """
    run = client.create_run(exp_id, run_name=cand["name"],
                            tags={"mlflow.parentRunId": parent, **cand["tags"]})
    rid = run.info.run_id
    now = int(time.time() * 1000)
    client.log_batch(
        rid,
        metrics=[Metric(k, float(v), now, 0) for k, v in cand["metrics"].items()],
        params=[Param(k, str(v)[:6000]) for k, v in cand["params"].items()],
        tags=[],
    )
    texts = {n: t for n, t in cand["texts"].items() if t}
    with tempfile.TemporaryDirectory(prefix="evoforge-artifacts-") as folder:
        for name, text in texts.items():
            Path(folder, name).write_text(text, encoding="utf-8")
        get_artifact_repository(run.info.artifact_uri, tracking_uri=uri).log_artifacts(folder)
    client.set_terminated(rid, status=cand["status"])
    return rid


def record_of(cand: dict[str, Any], parent: str, with_texts: bool = True,
              trace_ids: list[str] | None = None) -> RunRecord:
    """``cand`` as a :class:`RunRecord` nested under ``parent`` (without its texts if not
    ``with_texts``), linked to ``trace_ids``."""
    return RunRecord(name=cand["name"], parent_run_id=parent, params=cand["params"],
                     metrics=cand["metrics"], tags=cand["tags"], status=cand["status"],
                     texts=cand["texts"] if with_texts else {}, trace_ids=trace_ids or [])


# ---- traces -------------------------------------------------------------------------------------

def make_spans(i: int, node_id: str, n_tags: int = 5) -> list[Span]:
    """2 traces (one root span each, ``research`` and ``analyze``) as evoforge's
    ``infra/llm_traces.trace_spans`` makes them, with the first ``n_tags`` of its 5 trace tags
    (the trace name first). Not yet logged: pass them to ``TracingClient.log_spans``."""
    spans = []
    for stage in ("research", "analyze"):
        trace_id = generate_mlflow_trace_id_from_otel_trace_id(uuid.uuid4().int)
        start_ns = int((time.time() - 5) * 1e9)
        name = f"{stage} (LLM)"
        messages = [{"role": "system", "content": "You evolve programs. " * 40},
                    {"role": "user", "content": ("def f(x):\n    return x\n" * 120)[:3000]}]
        answer = "Here is the improved program:\n" + "    y = x * 2\n" * 150
        tags = {TraceTagKey.TRACE_NAME: name, "purpose": stage, "author": "llm",
                "model": "gpt-x", "node_id": node_id}
        tags = dict(list(tags.items())[:n_tags])
        attributes = {
            SpanAttributeKey.REQUEST_ID: trace_id,
            SpanAttributeKey.SPAN_TYPE: SpanType.CHAT_MODEL,
            SpanAttributeKey.INPUTS: {"messages": messages},
            SpanAttributeKey.OUTPUTS: {"model": "gpt-x", "choices": [{"index": 0, "message": {
                "role": "assistant", "content": answer}}],
                "usage": {"prompt_tokens": 900, "completion_tokens": 600}},
            SpanAttributeKey.CHAT_USAGE: {"input_tokens": 900, "output_tokens": 600,
                                          "total_tokens": 1500},
            SpanAttributeKey.MODEL: "gpt-x",
            "evoforge.stage": stage, "evoforge.backend": "openai", "evoforge.author": "llm",
            "evoforge.answered_by": "LLM", "evoforge.attempts": 1, "evoforge.seconds": 4.2,
            **{f"{SpanAttributeKey.TRACE_TAG_PREFIX}{k}": v for k, v in tags.items()},
        }
        spans.append(Span.from_dict({
            "trace_id": trace_id, "span_id": encode_span_id(uuid.uuid4().int >> 64),
            "parent_span_id": None, "name": name, "start_time_unix_nano": start_ns,
            "end_time_unix_nano": start_ns + 4_200_000_000, "events": [], "links": [],
            "status": {"code": "STATUS_CODE_OK", "message": ""},
            "attributes": {k: json.dumps(v) for k, v in attributes.items()},
        }))
    return spans


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
