"""MLflow tracking: the run is a parent MLflow run; every candidate is a nested run.

Logging happens on one background thread so that sqlite writes never stall the event loop;
`close()` drains it. A tracking failure is logged and never stops the evolution run.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("evoforge.tracking")

_STOP = object()


@dataclass(frozen=True)
class ChildRun:
    """A run nested under a candidate's run (an Optuna trial)."""

    name: str
    params: dict[str, Any]
    metrics: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    status: str = "FINISHED"


def default_tracking_uri(workspace: Path) -> str:
    """The embedded sqlite store in the workspace."""
    return f"sqlite:///{(workspace / 'mlflow.db').resolve()}"


class Tracker:
    """Writes the parent run and nested candidate runs to MLflow from a background thread."""

    def __init__(self, tracking_uri: str, experiment: str, artifact_root: Path, run_name: str,
                 parent_run_id: str | None = None, tags: dict[str, str] | None = None):
        self._queue: queue.Queue[Any] = queue.Queue()
        self._ready = threading.Event()
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
            if job is _STOP:
                return
            try:
                job()
            except Exception as exc:
                log.warning("MLflow logging failed: %s: %s", type(exc).__name__, exc)

    def _submit(self, job: Callable[[], None]) -> None:
        if self.error is None:
            self._queue.put(job)

    def log_parent(self, params: dict[str, Any] | None = None, metrics: dict[str, float] | None = None,
                   step: int = 0) -> None:
        """Params and metrics on the parent run."""
        self._submit(lambda: self._log_batch(self.parent_run_id, params, metrics, None, step))

    def log_candidate(self, name: str, params: dict[str, Any], metrics: dict[str, float],
                      texts: dict[str, str], tags: dict[str, str] | None = None,
                      status: str = "FINISHED", children: list[ChildRun] | None = None) -> None:
        """One nested run under the parent (params, metrics, text artifacts), with `children`
        nested under it (e.g. its Optuna trials), then closed."""

        def job() -> None:
            rid = self._run(self.parent_run_id or "", name, params, metrics, texts, tags, status)
            for child in children or ():
                self._run(rid, child.name, child.params, child.metrics, {}, child.tags, child.status)

        self._submit(job)

    def _run(self, parent: str, name: str, params: dict[str, Any], metrics: dict[str, float],
             texts: dict[str, str], tags: dict[str, str] | None, status: str) -> str:
        run = self._client.create_run(self._experiment_id, run_name=name,
                                      tags={"mlflow.parentRunId": parent, **(tags or {})})
        rid = run.info.run_id
        self._log_batch(rid, params, metrics, None, 0)
        for artifact_file, text in texts.items():
            if text:
                self._client.log_text(rid, text, artifact_file)
        self._client.set_terminated(rid, status=status)
        return rid

    def log_text_on_parent(self, text: str, artifact_file: str) -> None:
        """A text artifact (research_plan.md, report.md, ...) on the parent run."""
        self._submit(lambda: self._client.log_text(self.parent_run_id, text, artifact_file))

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
