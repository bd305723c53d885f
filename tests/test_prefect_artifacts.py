"""The evolution flow run's presence in Prefect: its name, its logs and its artifacts."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    LogFilter,
    LogFilterFlowRunId,
)

from evoforge.flows.cli import main
from evoforge.flows.run_names import folder_run_name
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.population.pool import Pool
from evoforge.stages.reports.leaderboard import leaderboard_rows
from evoforge.stages.sinks.prefect_sink import PrefectArtifacts, artifact_key, table_rows
from tests.helpers import prefect_run_of, read_nodes, read_status


def _node(node_id: str, score: float, parent: str | None = None) -> Node:
    return Node(id=node_id, run_id="r", code="x = 1", parent_id=parent, status=EVALUATED,
                score_full=score, motivation="  try\na bigger   radius ", backend="offline")


def test_artifact_keys_are_valid_prefect_keys():
    assert artifact_key("circle_packing", "1a2B3c4D", "leaderboard") == "circle-packing-1a2b3c4d-leaderboard"
    odd = artifact_key("My.Task  folder/", "x__y")
    assert odd == "my-task-folder-x-y" and re.fullmatch(r"[a-z0-9-]+", odd)


def test_the_table_artifact_ranks_the_pool_best_first():
    pool = Pool(maximize=False)
    for node in (_node("a", 3.0), _node("b", 1.0, parent="a"), _node("c", 2.0, parent="a")):
        pool.add(node)
    pool.nodes[0].params = {"r": 0.5, "k": 3}
    rows = table_rows(leaderboard_rows(pool), top=2)
    assert [(r["rank"], r["node"], r["score"], r["level"]) for r in rows] == [(1, "b", 1.0, "full"),
                                                                             (2, "c", 2.0, "full")]
    first = next(r for r in table_rows(leaderboard_rows(pool)) if r["node"] == pool.nodes[0].id)
    assert first["params"] == "k=3, r=0.5"
    assert rows[0]["parent"] == "a" and rows[0]["status"] == "evaluated"
    assert rows[0]["motivation"] == "try a bigger radius"
    json.dumps(rows)  # a table artifact is JSON


def test_progress_is_a_capped_percent_of_max_evals():
    artifacts = PrefectArtifacts("t", "r", max_evals=8, target=None)
    assert artifacts.percent(2) == 25.0 and artifacts.percent(12) == 100.0
    assert not artifacts.enabled  # outside a flow run it publishes nothing


def test_a_run_folder_names_its_flow_run(tmp_path):
    assert folder_run_name("circle_packing", tmp_path) == "circle_packing-new"
    assert folder_run_name(str(tmp_path / "tasks" / "my_task"), tmp_path / "run") == "my_task-new"
    (tmp_path / "status.json").write_text(json.dumps({"task": "packing", "run_id": "1a2b3c4d"}))
    assert folder_run_name("anything", tmp_path) == "packing-1a2b3c4d"


def _logs_and_artifacts(flow_run_id) -> tuple[list, list]:
    async def read() -> tuple[list, list]:
        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            artifacts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
            return logs, artifacts

    return asyncio.run(read())


@pytest.mark.slow
def test_a_cli_run_is_named_logged_and_has_its_artifacts(tmp_path: Path):
    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    config = tmp_path / "small.yaml"
    config.write_text("cognition: {enabled: false}\nanalyze: {enabled: false}\n")
    assert main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(ws),
                 "--max-evals", "4", "--quiet", "--config", str(config)]) == 0
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        run_id, mlflow_run = store.get_meta("run_id"), store.get_meta("mlflow_parent_run_id")
    flow_run, _ = prefect_run_of(run_dir)
    assert flow_run.name == f"circle_packing-{run_id}"  # a new folder: renamed once the id existed

    logs, artifacts = _logs_and_artifacts(flow_run.id)
    assert any(log.name == "evoforge.run" and f"run {run_id} of circle_packing" in log.message
               for log in logs)
    by_key = {a.key: a for a in artifacts}
    prefix = f"circle-packing-{run_id}"
    assert set(by_key) == {f"{prefix}-{kind}" for kind in ("progress", "mlflow", "leaderboard", "report")}
    assert by_key[f"{prefix}-progress"].type == "progress" and by_key[f"{prefix}-progress"].data == 100
    assert mlflow_run and f"/runs/{mlflow_run}" in by_key[f"{prefix}-mlflow"].data
    assert "mlflow ui --backend-store-uri sqlite:///" in by_key[f"{prefix}-mlflow"].description
    table = by_key[f"{prefix}-leaderboard"]
    rows = json.loads(table.data)
    assert table.type == "table" and rows[0]["node"] == read_status(run_dir)["best_node"]
    assert len(rows) == sum(n.status == EVALUATED for n in read_nodes(run_dir))
    report = by_key[f"{prefix}-report"]
    assert report.type == "markdown" and report.data == (run_dir / "report.md").read_text()
