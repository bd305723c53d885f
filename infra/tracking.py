"""MLflow tracking: the run is a parent MLflow run; every candidate is a nested run.

`Tracker` writes synchronously: it is the MLflow sink's (stages/sinks/mlflow_sink.py), which
calls it on its own thread, in batches, off the flow's event loop; a failure raises there and
is counted as the sink's, never stopping the evolution run. The LLM calls made for a candidate
become traces linked to its run (infra/llm_traces.py).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evoforge.infra.llm_traces import LLMCall, trace_spans, write_traces
from evoforge.infra.tracking_reconcile import reconcile

log = logging.getLogger("evoforge.tracking")

TRACE_TAGS = ("node_id",)  # the candidate's tags its traces carry too (the rest: on its run)


@dataclass(frozen=True)
class ChildRun:
    """A nested run: a candidate's (under the parent run), or an Optuna trial's (under it)."""

    name: str
    params: dict[str, Any]
    metrics: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "FINISHED"
    texts: dict[str, str] = field(default_factory=dict)  # text artifacts: file name -> text


def default_tracking_uri(workspace: Path) -> str:
    """The embedded sqlite store in the workspace."""
    return f"sqlite:///{(workspace / 'mlflow.db').resolve()}"


@dataclass(frozen=True)
class TrackingTarget:
    """Where a run's MLflow records go: the store, the artifact folder, the experiment."""

    uri: str
    artifact_root: Path
    experiment: str

    def ui_command(self) -> str:
        """The command that serves this store in MLflow's UI."""
        return f"mlflow ui --backend-store-uri {self.uri}"


def tracking_target(workspace: Path, task_name: str, tracking_uri: str | None = None,
                    experiment: str | None = None) -> TrackingTarget:
    """The run's target: `tracking_uri` or the workspace's sqlite store, experiment `evoforge/<task>`.

    >>> t = tracking_target(Path("/data/ws"), "circle_packing")
    >>> t.ui_command(), t.experiment
    ('mlflow ui --backend-store-uri sqlite:////data/ws/mlflow.db', 'evoforge/circle_packing')
    """
    return TrackingTarget(tracking_uri or default_tracking_uri(workspace),
                          (workspace / "mlartifacts").resolve(), experiment or f"evoforge/{task_name}")


MLFLOW_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default


def sqlite_file(uri: str) -> Path | None:
    """The file of an sqlite tracking store (None for any other store).

    >>> sqlite_file("sqlite:////data/ws/mlflow.db"), sqlite_file("http://host:5000")
    (PosixPath('/data/ws/mlflow.db'), None)
    """
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def is_server(uri: str) -> bool:
    """True for a tracking server (its UI is already up), False for a local store."""
    return uri.startswith(("http://", "https://"))


def run_page(target: TrackingTarget, run_id: str) -> str | None:
    """The address of the run's page in MLflow's UI; None when the store does not know the run."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        experiment_id = MlflowClient(tracking_uri=target.uri).get_run(run_id).info.experiment_id
    except MlflowException as exc:
        log.warning("MLflow run %s not found in %s: %s", run_id, target.uri, exc)
        return None
    base = target.uri.rstrip("/") if is_server(target.uri) else MLFLOW_UI
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"


def browse_hint(target: TrackingTarget, run_id: str) -> str:
    """How to look at the run in MLflow's UI: the command (for a local store), then the run's page."""
    page = run_page(target, run_id)
    if is_server(target.uri):
        return f"open {page or target.uri}"
    if page is None:  # the command still serves the store; only the page is unknown
        return f"{target.ui_command()}  (run {run_id})"
    return f"{target.ui_command()}  (then open {page})"


def _record(run: ChildRun) -> Any:
    """A nested run (an Optuna trial, a promoted candidate) as the bulk writer takes it."""
    from evoforge.infra.mlflow_bulk import RunRecord

    return RunRecord(run.name, None, run.params, run.metrics, run.tags, run.status, run.texts)


class Tracker:
    """The run's parent MLflow run and the nested runs under it, written synchronously."""

    def __init__(self, tracking_uri: str, experiment: str, artifact_root: Path, run_name: str,
                 parent_run_id: str | None = None, tags: dict[str, str] | None = None):
        self._uri, self._experiment, self._artifact_root = tracking_uri, experiment, artifact_root
        self._run_name, self._tags = run_name, tags or {}
        self.parent_run_id: str | None = parent_run_id
        self.uri = tracking_uri
        self._client: Any = None
        self._tracing: Any = None  # mlflow's TracingClient on the same store, made on first use
        self._experiment_id = ""

    def open(self) -> str:
        """Connect, make the experiment if new, and create the parent run (or mark a resumed one
        RUNNING again); returns the parent run's id. Raises when MLflow cannot be used."""
        from mlflow.tracking import MlflowClient  # heavy: imported when the run tracks

        # a new store announces its schema migration on the terminal at INFO; it belongs in run.log.
        # Its ERROR records (a locked or full store) repeat, traceback and all, the exception MLflow
        # raises next, which the MLflow sink counts and logs in run.log: not on the terminal too
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
        self._client = MlflowClient(tracking_uri=self._uri)
        exp = self._client.get_experiment_by_name(self._experiment)
        if exp is None:
            self._artifact_root.mkdir(parents=True, exist_ok=True)
            self._experiment_id = self._client.create_experiment(
                self._experiment, artifact_location=self._artifact_root.resolve().as_uri())
        else:
            self._experiment_id = exp.experiment_id
        if self.parent_run_id is None:
            run = self._client.create_run(self._experiment_id, run_name=self._run_name, tags=self._tags)
            self.parent_run_id = run.info.run_id
        else:
            self._client.update_run(self.parent_run_id, status="RUNNING")
        return self.parent_run_id

    def log_parent(self, params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None,
                   step: int = 0, tags: dict[str, Any] | None = None) -> None:
        """Params (set once: MLflow refuses a changed value), metrics and tags on the parent run."""
        self._log_batch(self.parent_run_id, params, metrics, tags, step)

    def log_runs(self, runs: Sequence[tuple[ChildRun, Sequence[ChildRun], Sequence[LLMCall]]]) -> None:
        """Nested runs under the parent (params, metrics, tags, text artifacts), each with its
        children nested under it (e.g. its Optuna trials) and its LLM calls as traces linked to
        it. A batch is two writes: the spans of all its traces, then all its runs with their
        trace links in one transaction (infra/mlflow_bulk.py; per call on a tracking server)."""
        from evoforge.infra.mlflow_bulk import RunRecord, write_runs

        spans: list[Any] = []
        records = []
        for run, children, calls in runs:
            trace_ids: list[str] = []
            if calls:
                tags = {k: run.tags[k] for k in TRACE_TAGS if k in run.tags}
                mine = trace_spans(list(calls), tags)
                spans += mine
                trace_ids = [span.trace_id for span in mine]
            records.append(RunRecord(run.name, self.parent_run_id, run.params, run.metrics, run.tags,
                                     run.status, run.texts, [_record(c) for c in children],
                                     trace_ids=trace_ids))
        if spans:
            self._tracing_client().log_spans(self._experiment_id, spans)
        write_runs(self._uri, self._experiment_id, records)

    def log_parent_traces(self, calls: Sequence[LLMCall], tags: dict[str, str] | None = None) -> None:
        """LLM calls made for the run rather than one candidate (the plan agent's), linked to the
        parent run."""
        self._write_traces([(self.parent_run_id, trace_spans(list(calls), tags or {}))])

    def reconcile(self, expected: dict[str, ChildRun]) -> None:
        """On resume, before anything else is logged: make the candidate runs match `expected`
        (node id -> its run, one per candidate with an outcome in the node database), as a run
        killed mid-write leaves them (infra/tracking_reconcile.py)."""
        parent = self.parent_run_id or ""
        done = reconcile(self._client, self._experiment_id, parent, expected,
                         lambda r: self._run(parent, r))
        if done:
            log.info("MLflow reconciled with the node database: %d runs left RUNNING marked KILLED,"
                     " %d candidate runs without an outcome removed, %d missing ones logged",
                     done.killed, done.removed, done.logged)

    def _write_traces(self, batches: list[tuple[str | None, list[Any]]]) -> None:
        if any(spans for _, spans in batches):
            write_traces(self._tracing_client(), self._client, self._experiment_id, batches)

    def _tracing_client(self) -> Any:
        if self._tracing is None:
            from mlflow.tracing.client import TracingClient

            self._tracing = TracingClient(self._uri)
        return self._tracing

    def _run(self, parent: str, run: ChildRun) -> str:
        created = self._client.create_run(self._experiment_id, run_name=run.name,
                                          tags={"mlflow.parentRunId": parent, **run.tags})
        rid = created.info.run_id
        self._log_batch(rid, run.params, run.metrics, None, 0)
        from evoforge.infra.mlflow_texts import write_texts

        write_texts(created.info.artifact_uri, run.texts, self._uri)
        self._client.set_terminated(rid, status=run.status)
        return rid

    def log_text_on_parent(self, text: str, artifact_file: str) -> None:
        """A text artifact (research_plan.md, report.md, ...) on the parent run."""
        self._client.log_text(self.parent_run_id, text, artifact_file)

    def log_file_on_parent(self, path: Path, artifact_path: str | None = None) -> None:
        """A file, or a folder's files, as artifacts of the parent run under `artifact_path`
        (e.g. `best/program.py`, `report/*.png`)."""
        if path.is_dir():
            self._client.log_artifacts(self.parent_run_id, str(path), artifact_path)
        elif path.is_file():
            self._client.log_artifact(self.parent_run_id, str(path), artifact_path)
        else:
            log.warning("MLflow: no file %s to log on the parent run", path)

    def _log_batch(self, run_id: str | None, params: dict[str, Any] | None,
                   metrics: dict[str, float] | None, tags: dict[str, Any] | None, step: int) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        self._client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, step) for k, v in (metrics or {}).items()
                     if isinstance(v, (int, float)) and math.isfinite(v)],
            params=[Param(k, str(v)[:6000]) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )

    def terminate(self, status: str = "FINISHED") -> None:
        """Finish the parent run."""
        if self.parent_run_id:
            self._client.set_terminated(self.parent_run_id, status=status)
