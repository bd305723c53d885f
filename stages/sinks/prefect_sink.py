"""The Prefect artifacts sink: the run's live progress (evaluations as a percent of the budget),
a link to its MLflow parent run, and at the end the leaderboard as a table and report.md as
markdown, on the flow run that made them.

Keys are per run folder (`circle-packing-1a2b3c4d-leaderboard`), so every flow run that continues
a folder adds a version to the same artifacts. Outside a flow run it records nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.context import FlowRunContext

from evoforge.infra.tracking import TrackingTarget, is_server, run_page
from evoforge.stages.sinks.base import Event, EventKind, Sink

TOP = 20  # leaderboard rows in the table artifact


def artifact_key(*parts: str) -> str:
    """A valid Prefect artifact key (lowercase letters, digits, dashes) made of `parts`.

    >>> artifact_key("circle_packing", "1A2B")
    'circle-packing-1a2b'
    """
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")


def table_rows(rows: Sequence[Mapping[str, Any]], top: int = TOP) -> list[dict[str, Any]]:
    """leaderboard.json's rows as a flat table (knob values as one text column)."""
    return [{**row, "params": ", ".join(f"{k}={v}" for k, v in sorted(row["params"].items()))}
            for row in list(rows)[:top]]


def mlflow_link(target: TrackingTarget, run_id: str) -> tuple[str, str] | None:
    """The MLflow UI address of a run and a description saying how to open it."""
    page = run_page(target, run_id)
    if page is None:
        return None
    if is_server(target.uri):
        return page, f"The run's parent MLflow run on {target.uri}."
    return page, f"The run's parent MLflow run. Start the UI first: `{target.ui_command()}`"


class PrefectArtifacts(Sink):
    """Publishes one evolution run's artifacts on its flow run (`_sync`: from the sink's thread)."""

    name = "prefect"
    interval_s = 1.0

    def __init__(self, task_name: str, run_id: str, max_evals: int, target: TrackingTarget | None,
                 min_interval_s: float = 5.0) -> None:
        self.key = artifact_key(task_name, run_id)
        self.task_name, self.max_evals, self.target = task_name, max_evals, target
        self.min_interval_s = min_interval_s
        self.enabled = FlowRunContext.get() is not None
        self._progress_id: UUID | None = None
        self._last_update = 0.0
        self._linked = False

    def percent(self, evaluations: int) -> float:
        """Evaluations in the folder as a percent of the budget's max_evals."""
        return round(100.0 * min(evaluations, self.max_evals) / self.max_evals, 1)

    def record(self, events: Sequence[Event]) -> None:
        if not self.enabled:
            return
        snapshots = [e.payload for e in events if e.kind == EventKind.SNAPSHOT]
        closing = [e.payload for e in events if e.kind == EventKind.CLOSE]
        if snapshots:
            self._progress(snapshots[-1]["status"], force=bool(closing))
        for payload in closing:
            self._finish(payload)

    def _progress(self, status: Mapping[str, Any], force: bool = False) -> None:
        percent = self.percent(status["evaluations"])
        if self._progress_id is None:
            self._progress_id = create_progress_artifact(
                percent, key=artifact_key(self.key, "progress"), _sync=True,
                description=f"Evaluations in the run folder, percent of max_evals ({self.max_evals}).")
            self._last_update = time.monotonic()
        elif force or time.monotonic() - self._last_update >= self.min_interval_s:
            update_progress_artifact(self._progress_id, percent, _sync=True)
            self._last_update = time.monotonic()
        mlflow_run = status.get("mlflow_run_id")
        if not self._linked and self.target is not None and mlflow_run:
            self._linked = True
            link = mlflow_link(self.target, mlflow_run)
            if link is not None:
                create_link_artifact(link[0], link_text=f"MLflow run {mlflow_run}", _sync=True,
                                     key=artifact_key(self.key, "mlflow"), description=link[1])

    def _finish(self, payload: Mapping[str, Any]) -> None:
        """The leaderboard table and the report."""
        snapshot = payload["snapshot"]
        self._progress(snapshot["status"], force=True)
        evaluated = snapshot["status"]["nodes_evaluated"]
        level = snapshot["status"]["search_level"]
        create_table_artifact(table_rows(snapshot["leaderboard"]), key=artifact_key(self.key, "leaderboard"),
                              _sync=True, description=f"{self.task_name}: the best {TOP} of {evaluated} "
                                                      f"evaluated candidates, ranked by the {level} score.")
        report = payload.get("texts", {}).get("report.md")
        if report:
            create_markdown_artifact(report, key=artifact_key(self.key, "report"), _sync=True,
                                     description=f"{self.task_name}: report.md")
