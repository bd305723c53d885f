"""Deployments: `evoforge deploy` against a real Prefect server, two triggered runs continuing one
run folder; the flags' user errors; the shipped prefect.yaml."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest
import yaml
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowFilter,
    FlowFilterName,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.schedules import CronSchedule
from prefect.exceptions import ObjectNotFound
from prefect.flows import load_flow_from_entrypoint

from evoforge.flows.cli import main
from evoforge.flows.deploy import DeploymentParams, evaluations_in, scheduled_run
from evoforge.flows.deploy_cli import deployment_params
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.vllm_server import free_port
from tests.helpers import REPO, read_nodes, wait_until_answers


def _last_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    return err[-1]


@pytest.mark.parametrize(("flags", "named"), [
    (["--cron", "0 * * * *", "--interval", "60"], "not both"),
    (["--cron", "every tuesday"], "--cron 'every tuesday'"),
    (["--max-evals-per-run", "0"], "--max-evals-per-run must be >= 1"),
    (["--interval", "-5"], "--interval must be > 0"),
])
def test_bad_deploy_flags_are_one_line_exit_2(tmp_path, capsys, flags, named):
    assert main(["deploy", "circle_packing", "--workspace", str(tmp_path), *flags]) == 2
    line = _last_error_line(capsys)
    assert line.startswith("evoforge: error: deploy:") and named in line


def test_a_missing_task_is_exit_2_before_serving(tmp_path, capsys):
    assert main(["deploy", str(tmp_path / "nope"), "--workspace", str(tmp_path)]) == 2
    assert "nope" in _last_error_line(capsys)


def test_deployment_parameters_are_absolute_and_hold_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-deploy-secret-123")
    monkeypatch.chdir(tmp_path)
    ns = Namespace(task="circle_packing", name=None, cron=None, interval=None, max_evals_per_run=7,
                   run_dir=None, workspace="ws", config=None, llm_base_url="http://h:1/v1", llm_model=None)
    params = deployment_params(ns)
    assert params.run_dir == str(tmp_path / "ws" / "circle_packing")
    assert params.workspace == str(tmp_path / "ws") and params.max_evals_per_run == 7
    assert "sk-deploy-secret-123" not in json.dumps(params.model_dump(mode="json"))
    assert params.overrides(12)["budget.max_evals"] == 12
    assert evaluations_in(tmp_path / "ws" / "circle_packing") == 0  # no folder yet


def test_prefect_yaml_deploys_the_scheduled_flow():
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    deployments = spec["deployments"]
    assert deployments
    for dep in deployments:
        flow = load_flow_from_entrypoint(dep["entrypoint"])
        assert flow.name == dep["flow_name"] == scheduled_run.name
        params = flow.validate_parameters(dep["parameters"])["params"]
        assert isinstance(params, DeploymentParams) and params.max_evals_per_run >= 1
        for schedule in dep["schedules"]:
            CronSchedule(cron=schedule["cron"], timezone=schedule.get("timezone"))
        assert dep["concurrency_limit"] == 1 and dep["work_pool"]["name"]


def _tail(log: Path) -> str:
    return log.read_text()[-4000:]


def _start(cmd: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen:
    with log.open("w") as out:  # the child holds its own copy of the descriptor
        return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """End the process group: the server or the runner and its flow-run processes."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


async def _trigger_two_runs(url: str, served: subprocess.Popen, log: Path) -> dict:
    """Create two runs of the served deployment at once and wait for both to end."""
    async with PrefectClient(url) as client:
        deadline = time.monotonic() + 180
        while True:
            assert served.poll() is None, f"evoforge deploy exited:\n{_tail(log)}"
            try:
                deployment = await client.read_deployment_by_name("evoforge-scheduled/t")
                break
            except ObjectNotFound:  # not registered yet
                assert time.monotonic() < deadline, _tail(log)
                await asyncio.sleep(1)
        runs = [await client.create_flow_run_from_deployment(deployment.id) for _ in range(2)]
        deadline = time.monotonic() + 600
        while True:
            states = [await client.read_flow_run(r.id) for r in runs]
            if all(s.state.is_final() for s in states):
                break
            assert time.monotonic() < deadline, _tail(log)
            await asyncio.sleep(2)
        assert all(s.state.is_completed() for s in states), \
            f"{[s.state for s in states]}\n{_tail(log)}"
        scheduled = sorted(states, key=lambda r: r.start_time)
        subflows = sorted(await client.read_flow_runs(flow_filter=FlowFilter(
            name=FlowFilterName(any_=["evoforge-run"]))), key=lambda r: r.start_time)
        logs = {r.id: await client.read_logs(log_filter=LogFilter(
            flow_run_id=LogFilterFlowRunId(any_=[r.id]))) for r in scheduled + subflows}
        artifacts = await client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[subflows[-1].id])))
        return {"scheduled": scheduled, "subflows": subflows, "logs": logs, "artifacts": artifacts}


@pytest.mark.slow
def test_a_served_deployment_continues_its_run_folder(tmp_path: Path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    base["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    server_env = {**base, "PREFECT_HOME": str(tmp_path / "server-home"), "PREFECT_UI_ENABLED": "false"}
    deploy_env = {**base, "PREFECT_HOME": str(tmp_path / "deploy-home"), "PREFECT_API_URL": url,
                  "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    config = tmp_path / "small.yaml"
    config.write_text("cognition: {enabled: false}\nanalyze: {enabled: false}\n")
    run_dir = tmp_path / "run"
    server_log, deploy_log = tmp_path / "server.log", tmp_path / "deploy.log"
    started: list[subprocess.Popen] = []
    try:
        started.append(_start([str(Path(sys.executable).parent / "prefect"), "server", "start",
                               "--host", "127.0.0.1", "--port", str(port)],
                              server_env, server_log, tmp_path))
        wait_until_answers(f"{url}/health", started[0], server_log)
        started.append(_start([sys.executable, "-m", "evoforge.flows.cli", "deploy", "circle_packing",
                               "--name", "t", "--max-evals-per-run", "5", "--run-dir", str(run_dir),
                               "--workspace", str(tmp_path / "ws"), "--config", str(config)],
                              deploy_env, deploy_log, tmp_path))
        seen = asyncio.run(_trigger_two_runs(url, started[1], deploy_log))
    finally:
        for proc in reversed(started):
            _stop(proc)

    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        run_id, mlflow_run = store.get_meta("run_id"), store.get_meta("mlflow_parent_run_id")
    # the seed is one of the first run's 5 evaluations; the second run added 5 more to the same folder
    assert sum(n.was_evaluated for n in read_nodes(run_dir)) == 10
    subflows, scheduled = seen["subflows"], seen["scheduled"]
    assert [r.parameters["request"]["config"]["budget"]["max_evals"] for r in subflows] == [5, 10]
    assert [r.name for r in subflows] == [f"circle_packing-{run_id}"] * 2
    assert [r.name for r in scheduled] == [f"circle_packing-{run_id}-scheduled"] * 2
    # no key field in the parameters (names of key variables, e.g. `embedding_api_key_env`, are no secret)
    assert '"api_key"' not in json.dumps([r.parameters for r in subflows + scheduled])

    first, second = (seen["logs"][r.id] for r in scheduled)
    assert any(f"{run_dir}: 0 evaluations in the folder, this run goes to 5" in x.message for x in first)
    assert any(f"{run_dir}: 5 evaluations in the folder, this run goes to 10" in x.message for x in second)
    assert any(x.name == "evoforge.run" and f"run {run_id} of circle_packing" in x.message
               for x in seen["logs"][subflows[-1].id])

    by_key = {a.key: a for a in seen["artifacts"]}
    prefix = f"circle-packing-{run_id}"
    assert by_key[f"{prefix}-progress"].type == "progress" and by_key[f"{prefix}-progress"].data == 100
    assert by_key[f"{prefix}-leaderboard"].type == "table"
    assert len(json.loads(by_key[f"{prefix}-leaderboard"].data)) >= 2
    assert by_key[f"{prefix}-report"].data == (run_dir / "report.md").read_text()
    assert f"/runs/{mlflow_run}" in by_key[f"{prefix}-mlflow"].data
