"""MLflow tracking: the run is a parent MLflow run; every candidate is a nested run.

Logging happens on one background thread so that sqlite writes never stall the event loop;
`close()` drains it. A tracking failure is logged and never stops the evolution run. The LLM
calls made for a candidate become traces linked to its run (infra/llm_traces.py).
"""

from __future__ import annotations

import logging
import math
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evoforge.infra.llm_traces import LLMCall, trace_spans, write_traces
from evoforge.infra.tracking_reconcile import reconcile

log = logging.getLogger("evoforge.tracking")

_STOP = object()
TRACE_TAGS = ("node_id",)  # the candidate's tags its traces carry too (the rest: on its run)
_TRACE_BATCH = 200  # traces buffered before they are written even though more jobs are queued


@dataclass(frozen=True)
class ChildRun:
    """A nested run: a candidate's (under the parent run), or an Optuna trial's (under it)."""

    name: str
    params: dict[str, Any]
    metrics: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "FINISHED"
    texts: dict[str, str] = field(default_factory=dict)  # text artifacts: file name -> text


def _log_texts(artifact_uri: str, tracking_uri: str, texts: dict[str, str]) -> None:
    """Write a run's text artifacts in one upload to its artifact store (the URI its creation
    returned): what `log_text` per file does, without a run lookup and a staging folder per file."""
    texts = {name: text for name, text in texts.items() if text}
    if not texts:
        return
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    with tempfile.TemporaryDirectory(prefix="evoforge-artifacts-") as folder:
        for name, text in texts.items():
            path = Path(folder, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        get_artifact_repository(artifact_uri, tracking_uri=tracking_uri).log_artifacts(folder)


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


class Tracker:
    """Writes the parent run and nested candidate runs to MLflow from a background thread."""

    def __init__(self, tracking_uri: str, experiment: str, artifact_root: Path, run_name: str,
                 parent_run_id: str | None = None, tags: dict[str, str] | None = None):
        self._queue: queue.Queue[Any] = queue.Queue()
        self._ready = threading.Event()
        self._uri = tracking_uri
        self._tracing: Any = None  # mlflow's TracingClient on the same store, made on first use
        self._pending: list[tuple[str | None, list[Any]]] = []  # traces to write: (run id, spans)
        self.parent_run_id: str | None = parent_run_id
        self.error: str | None = None
        self._thread = threading.Thread(
            target=self._work,
            args=(tracking_uri, experiment, artifact_root, run_name, tags or {}),
            name="evoforge-mlflow",
            daemon=True,
        )
        self._thread.start()

    def wait_ready(self, timeout: float = 60.0) -> str | None:
        """Block until the parent run exists; returns its id (None if tracking failed)."""
        self._ready.wait(timeout)
        return self.parent_run_id

    def _work(self, uri: str, experiment: str, artifact_root: Path, run_name: str,
              tags: dict[str, str]) -> None:
        try:
            from mlflow.tracking import MlflowClient  # heavy import kept off the main thread

            # a new store announces its schema migration on the terminal at INFO; it belongs in run.log
            logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
            self._client = MlflowClient(tracking_uri=uri)
            exp = self._client.get_experiment_by_name(experiment)
            if exp is None:
                artifact_root.mkdir(parents=True, exist_ok=True)
                exp_id = self._client.create_experiment(
                    experiment, artifact_location=artifact_root.resolve().as_uri()
                )
            else:
                exp_id = exp.experiment_id
            self._experiment_id = exp_id
            if self.parent_run_id is None:
                run = self._client.create_run(exp_id, run_name=run_name, tags=tags)
                self.parent_run_id = run.info.run_id
            else:
                self._client.update_run(self.parent_run_id, status="RUNNING")
        except Exception as exc:  # tracking must never take the run down
            self.error = f"MLflow unavailable: {type(exc).__name__}: {exc}"
            log.warning(self.error)
            self._ready.set()
            return
        self._ready.set()
        while True:
            job = self._queue.get()
            try:
                if job is not _STOP:
                    job()
                if job is _STOP or self._queue.empty():
                    self._flush_traces()
            except Exception as exc:
                log.warning("MLflow logging failed: %s: %s", type(exc).__name__, exc, exc_info=True)
            if job is _STOP:
                return

    def _submit(self, job: Callable[[], None]) -> None:
        if self.error is None:
            self._queue.put(job)

    def log_parent(self, params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None,
                   step: int = 0, tags: dict[str, Any] | None = None) -> None:
        """Params (set once: MLflow refuses a changed value), metrics and tags on the parent run."""
        self._submit(lambda: self._log_batch(self.parent_run_id, params, metrics, tags, step))

    def log_candidate(self, name: str, params: dict[str, Any], metrics: dict[str, float],
                      texts: dict[str, str], tags: dict[str, str] | None = None,
                      status: str = "FINISHED", children: list[ChildRun] | None = None,
                      traces: list[LLMCall] | None = None) -> None:
        """One nested run under the parent (params, metrics, text artifacts), with `children`
        nested under it (e.g. its Optuna trials) and `traces` (its LLM calls) linked to it."""

        def job() -> None:
            rid = self._run(self.parent_run_id or "", name, params, metrics, texts, tags, status)
            for child in children or ():
                self._run(rid, child.name, child.params, child.metrics, {}, child.tags, child.status)
            if traces:
                self._traces(traces, rid, {k: tags[k] for k in TRACE_TAGS if tags and k in tags})

        self._submit(job)

    def reconcile(self, expected: dict[str, ChildRun]) -> None:
        """On resume, before anything else is logged: make the candidate runs match `expected`
        (node id -> its run, one per candidate with an outcome in the node database), as a run
        killed mid-write leaves them (infra/tracking_reconcile.py)."""

        def job() -> None:
            parent = self.parent_run_id or ""
            done = reconcile(self._client, self._experiment_id, parent, expected,
                             lambda r: self._run(parent, r.name, r.params, r.metrics, r.texts, r.tags,
                                                 r.status))
            if done:
                log.info("MLflow reconciled with the node database: %d runs left RUNNING marked KILLED,"
                         " %d candidate runs without an outcome removed, %d missing ones logged",
                         done.killed, done.removed, done.logged)

        self._submit(job)

    def log_parent_traces(self, calls: list[LLMCall], tags: dict[str, str] | None = None) -> None:
        """LLM calls made for the run rather than one candidate (the plan agent's), linked to the
        parent run."""
        self._submit(lambda: self._traces(calls, self.parent_run_id, tags or {}))

    def _traces(self, calls: list[LLMCall], run_id: str | None, tags: dict[str, str]) -> None:
        """Buffer the calls' traces; they are written when the queue runs dry (or at 200), so a
        backlog is written in few transactions."""
        self._pending.append((run_id, trace_spans(calls, tags)))
        if sum(len(spans) for _, spans in self._pending) >= _TRACE_BATCH:
            self._flush_traces()

    def _flush_traces(self) -> None:
        batches, self._pending = self._pending, []
        if not batches:
            return
        if self._tracing is None:
            from mlflow.tracing.client import TracingClient

            self._tracing = TracingClient(self._uri)
        write_traces(self._tracing, self._client, self._experiment_id, batches)

    def _run(self, parent: str, name: str, params: dict[str, Any], metrics: dict[str, float],
             texts: dict[str, str], tags: dict[str, str] | None, status: str) -> str:
        run = self._client.create_run(self._experiment_id, run_name=name,
                                      tags={"mlflow.parentRunId": parent, **(tags or {})})
        rid = run.info.run_id
        self._log_batch(rid, params, metrics, None, 0)
        _log_texts(run.info.artifact_uri, self._uri, texts)
        self._client.set_terminated(rid, status=status)
        return rid

    def log_text_on_parent(self, text: str, artifact_file: str) -> None:
        """A text artifact (research_plan.md, report.md, ...) on the parent run."""
        self._submit(lambda: self._client.log_text(self.parent_run_id, text, artifact_file))

    def log_file_on_parent(self, path: Path, artifact_path: str | None = None) -> None:
        """A file, or a folder's files, as artifacts of the parent run under `artifact_path`
        (e.g. `best/program.py`, `report/*.png`); read when the tracker's thread gets to it."""

        def job() -> None:
            if path.is_dir():
                self._client.log_artifacts(self.parent_run_id, str(path), artifact_path)
            elif path.is_file():
                self._client.log_artifact(self.parent_run_id, str(path), artifact_path)
            else:
                log.warning("MLflow: no file %s to log on the parent run", path)

        self._submit(job)

    def _log_batch(self, run_id: str | None, params: dict[str, Any] | None,
                   metrics: dict[str, float] | None, tags: dict[str, str] | None, step: int) -> None:
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        self._client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, step) for k, v in (metrics or {}).items()
                     if isinstance(v, (int, float)) and math.isfinite(v)],
            params=[Param(k, str(v)[:6000]) for k, v in (params or {}).items()],
            tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()],
        )

    def close(self, status: str = "FINISHED", timeout: float = 120.0) -> None:
        """Finish the parent run and drain the queue."""
        if self.error is None and self.parent_run_id:
            self._queue.put(lambda: self._client.set_terminated(self.parent_run_id, status=status))
        self._queue.put(_STOP)
        self._thread.join(timeout)
