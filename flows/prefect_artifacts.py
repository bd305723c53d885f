"""The evolution run's Prefect artifacts: live progress, the MLflow parent run's link, and at the
end the leaderboard as a table and report.md as markdown.

Keys are per run folder (`circle-packing-1a2b3c4d-leaderboard`), so every flow run that continues a
folder adds a version to the same artifacts. Publishing is tracking: a failure is a logged warning,
never the end of the run.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable
from typing import Any
from uuid import UUID

from prefect.artifacts import (
    acreate_link_artifact,
    acreate_markdown_artifact,
    acreate_progress_artifact,
    acreate_table_artifact,
    aupdate_progress_artifact,
)
from prefect.context import FlowRunContext

from evoforge.infra.tracking import TrackingTarget, is_server, run_page
from evoforge.stages.population.pool import Pool
from evoforge.stages.reports.leaderboard import leaderboard_rows

log = logging.getLogger("evoforge.prefect")

TOP = 20  # leaderboard rows in the table artifact


def artifact_key(*parts: str) -> str:
    """A valid Prefect artifact key (lowercase letters, digits, dashes) made of `parts`."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")


def table_rows(pool: Pool, top: int = TOP) -> list[dict[str, Any]]:
    """leaderboard.json's rows as a flat table (knob values as one text column)."""
    return [{**row, "params": ", ".join(f"{k}={v}" for k, v in sorted(row["params"].items()))}
            for row in leaderboard_rows(pool, top)]


def mlflow_link(target: TrackingTarget, run_id: str) -> tuple[str, str] | None:
    """The MLflow UI address of a run and a description saying how to open it."""
    page = run_page(target, run_id)
    if page is None:
        return None
    if is_server(target.uri):
        return page, f"The run's parent MLflow run on {target.uri}."
    return page, f"The run's parent MLflow run. Start the UI first: `{target.ui_command()}`"


class RunArtifacts:
    """Publishes one evolution run's artifacts from inside its flow run (a no-op outside one)."""

    def __init__(self, task_name: str, run_id: str, max_evals: int, min_interval_s: float = 5.0):
        self.key = artifact_key(task_name, run_id)
        self.max_evals = max_evals
        self.min_interval_s = min_interval_s
        self.enabled = FlowRunContext.get() is not None
        self._progress_id: UUID | None = None
        self._last_update = 0.0
        self._pending: asyncio.Task[None] | None = None

    def percent(self, evaluations: int) -> float:
        """Evaluations in the folder as a percent of the budget's max_evals."""
        return round(100.0 * min(evaluations, self.max_evals) / self.max_evals, 1)

    async def _publish(self, what: str, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except Exception as exc:  # tracking: a warning in run.log and the flow's logs, the run goes on
            log.warning("could not publish the %s artifact: %s", what, exc, exc_info=True)
            return None

    async def start(self, evaluations: int, target: TrackingTarget | None, mlflow_run_id: str | None) -> None:
        """The progress artifact, and the link to the MLflow parent run when there is one."""
        if not self.enabled:
            return
        self._progress_id = await self._publish("progress", acreate_progress_artifact(
            self.percent(evaluations), key=artifact_key(self.key, "progress"),
            description=f"Evaluations in the run folder, percent of max_evals ({self.max_evals})."))
        self._last_update = time.monotonic()
        if target is not None and mlflow_run_id:
            await self._publish("MLflow link", self._link(target, mlflow_run_id))

    async def _link(self, target: TrackingTarget, mlflow_run_id: str) -> None:
        link = await asyncio.to_thread(mlflow_link, target, mlflow_run_id)
        if link is not None:
            await acreate_link_artifact(link[0], link_text=f"MLflow run {mlflow_run_id}",
                                        key=artifact_key(self.key, "mlflow"), description=link[1])

    def poke(self, evaluations: int) -> None:
        """From the periodic ticker: update the progress artifact, at most every `min_interval_s`."""
        if self._progress_id is None or (self._pending is not None and not self._pending.done()):
            return
        if time.monotonic() - self._last_update < self.min_interval_s:
            return
        self._last_update = time.monotonic()
        self._pending = asyncio.get_running_loop().create_task(self._update(evaluations))

    async def _update(self, evaluations: int) -> None:
        if self._progress_id is not None:
            await self._publish("progress", aupdate_progress_artifact(self._progress_id,
                                                                      self.percent(evaluations)))

    async def finish(self, evaluations: int, pool: Pool, task_name: str, report: str | None) -> None:
        """The last progress, the leaderboard table and the report; waits for a pending update."""
        if not self.enabled:
            return
        if self._pending is not None:
            await self._pending
        await self._update(evaluations)
        await self._publish("leaderboard", acreate_table_artifact(
            table_rows(pool), key=artifact_key(self.key, "leaderboard"),
            description=f"{task_name}: the best {TOP} of {len(pool.nodes)} evaluated candidates, "
                        f"ranked by the {pool.level} score."))
        if report:
            await self._publish("report", acreate_markdown_artifact(
                report, key=artifact_key(self.key, "report"), description=f"{task_name}: report.md"))
