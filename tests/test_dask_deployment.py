"""A deployment whose config selects the Dask executor, served by `evoforge deploy` against a real
Prefect server and triggered through its API: the run completes with every evaluation made on
the Dask cluster's workers, which report their task runs to that server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("prefect_dask")  # the dask extra; the dev extra installs it

from distributed import Client, LocalCluster  # noqa: E402
from prefect.client.orchestration import PrefectClient  # noqa: E402
from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterId  # noqa: E402
from prefect.exceptions import ObjectNotFound  # noqa: E402

from evoforge.infra.vllm_server import free_port  # noqa: E402
from tests.helpers import read_nodes, wait_until_answers  # noqa: E402
from tests.test_deploy import _start, _stop, _tail  # noqa: E402

pytestmark = pytest.mark.slow


async def _trigger(url: str, served: subprocess.Popen, log: Path) -> dict:
    """One run of the served deployment, to its end; its state, subflow and task run names."""
    async with PrefectClient(url) as client:
        deadline = time.monotonic() + 180
        while True:
            assert served.poll() is None, f"evoforge deploy exited:\n{_tail(log)}"
            try:
                deployment = await client.read_deployment_by_name("evoforge-scheduled/d")
                break
            except ObjectNotFound:  # not registered yet
                assert time.monotonic() < deadline, _tail(log)
                await asyncio.sleep(1)
        run = await client.create_flow_run_from_deployment(deployment.id)
        deadline = time.monotonic() + 600
        while not (run := await client.read_flow_run(run.id)).state.is_final():
            assert time.monotonic() < deadline, _tail(log)
            await asyncio.sleep(2)
        subflows = await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=["evoforge-run"])))
        tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[s.id for s in subflows])))
        return {"state": run.state, "subflows": subflows, "tasks": [t.name for t in tasks]}


def test_a_deployment_with_the_dask_executor_evaluates_on_the_cluster(tmp_path: Path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    base["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    server_env = {**base, "PREFECT_HOME": str(tmp_path / "server-home"), "PREFECT_UI_ENABLED": "false"}
    deploy_env = {**base, "PREFECT_HOME": str(tmp_path / "deploy-home"), "PREFECT_API_URL": url,
                  "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    run_dir = tmp_path / "run"
    server_log, deploy_log = tmp_path / "server.log", tmp_path / "deploy.log"
    started: list[subprocess.Popen] = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as dask_client:
        worker_pids = set(dask_client.run(os.getpid).values())
        config = tmp_path / "dask.yaml"
        config.write_text("cognition: {enabled: false}\nanalyze: {enabled: false}\n"
                          f"engine: {{executor: dask, dask_address: '{cluster.scheduler_address}'}}\n")
        try:
            started.append(_start([str(Path(sys.executable).parent / "prefect"), "server", "start",
                                   "--host", "127.0.0.1", "--port", str(port)],
                                  server_env, server_log, tmp_path))
            wait_until_answers(f"{url}/health", started[0], server_log)
            started.append(_start([sys.executable, "-m", "evoforge.flows.cli", "deploy", "circle_packing",
                                   "--name", "d", "--max-evals-per-run", "4", "--run-dir", str(run_dir),
                                   "--workspace", str(tmp_path / "ws"), "--config", str(config)],
                                  deploy_env, deploy_log, tmp_path))
            seen = asyncio.run(_trigger(url, started[1], deploy_log))
        finally:
            for proc in reversed(started):
                _stop(proc)

    assert seen["state"].is_completed(), f"{seen['state']}\n{_tail(deploy_log)}"
    assert len(seen["subflows"]) == 1
    assert seen["subflows"][0].parameters["request"]["config"]["engine"]["executor"] == "dask"
    evaluated = [n for n in read_nodes(run_dir) if n.was_evaluated]
    assert len(evaluated) == 4
    # every evaluation ran in one of the cluster's worker processes, none in the flow's
    assert {int(n.artifacts["evaluated_on"].rsplit(":", 1)[1]) for n in evaluated} <= worker_pids
    # and the workers reported their task runs to the deployment's Prefect server
    assert {f"evaluate-{n.id}" for n in evaluated} <= set(seen["tasks"])
