"""Bring a killed run's MLflow records in line with its node database when the run resumes.

A SIGKILL cuts the tracker's thread anywhere: a candidate's run created but never terminated
(left RUNNING), a run logged for a result the node database never received (the node is then
evaluated again, and would get a second run), or a result in the database whose run was still
queued (missing). `reconcile` makes MLflow say what the database says: one FINISHED or FAILED
run per candidate with an outcome. Runs that were cut off are marked KILLED and deleted (MLflow
deletes softly: they stay restorable), then the candidate is logged again from the database;
a trial or promotion run left RUNNING is marked KILLED.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # infra/tracking.py runs `reconcile` on its thread
    from evoforge.infra.tracking import ChildRun

RUNNING, KILLED = "RUNNING", "KILLED"
CANDIDATE_KIND = "candidate"  # the `kind` tag of a candidate's run (stages/sinks/mlflow_runs.py)


@dataclass(frozen=True)
class Reconciled:
    """What `reconcile` changed."""

    killed: int  # runs left RUNNING, now KILLED
    removed: int  # candidate runs without a candidate outcome behind them, or a second one
    logged: int  # candidates with an outcome but no run, logged from the database

    def __bool__(self) -> bool:
        return bool(self.killed or self.removed or self.logged)


def all_runs(client: Any, experiment_id: str, filter_string: str, deleted_too: bool = False) -> list[Any]:
    """Every run of the experiment matching `filter_string`, all pages."""
    from mlflow.entities import ViewType

    view = ViewType.ALL if deleted_too else ViewType.ACTIVE_ONLY
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string, run_view_type=view,
                                  max_results=1000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs


def reconcile(client: Any, experiment_id: str, parent_run_id: str, expected: dict[str, ChildRun],
              log_run: Callable[[ChildRun], object]) -> Reconciled:
    """Make the candidate runs under `parent_run_id` match `expected` (node id -> its run, one per
    candidate with an outcome), logging the missing ones with `log_run`."""
    under = all_runs(client, experiment_id, f"tags.mlflow.parentRunId = '{parent_run_id}'")
    kept: set[str] = set()
    dropped = []
    for run in sorted(under, key=lambda r: r.info.start_time):
        if run.data.tags.get("kind") != CANDIDATE_KIND:
            continue
        node_id = run.data.tags.get("node_id", "")
        if run.info.status == RUNNING or node_id not in expected or node_id in kept:
            dropped.append(run)
        else:
            kept.add(node_id)
    killed = 0
    for run in dropped:  # with the runs nested under it (its trials)
        nested = all_runs(client, experiment_id, f"tags.mlflow.parentRunId = '{run.info.run_id}'")
        for r in (run, *nested):
            if r.info.status == RUNNING:
                client.set_terminated(r.info.run_id, status=KILLED)
                killed += 1
            client.delete_run(r.info.run_id)
    tree = {parent_run_id} | {r.info.run_id for r in under}
    for run in all_runs(client, experiment_id, f"attributes.status = '{RUNNING}'"):
        if run.data.tags.get("mlflow.parentRunId") in tree:  # a trial or promotion cut off
            client.set_terminated(run.info.run_id, status=KILLED)
            killed += 1
    missing = [node_id for node_id in expected if node_id not in kept]
    for node_id in missing:
        log_run(expected[node_id])
    return Reconciled(killed, len(dropped), len(missing))
