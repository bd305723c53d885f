"""Evaluations on a Dask cluster (`--executor dask`): real runs on worker processes, an existing
scheduler, aborting a job on its worker, and the one-line errors of a bad setup."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("prefect_dask")  # the dask extra; the dev extra installs it

from distributed import Client, LocalCluster  # noqa: E402
from prefect import flow  # noqa: E402
from prefect_dask import DaskTaskRunner  # noqa: E402

from evoforge.evaluators.sandbox import SandboxLimits  # noqa: E402
from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.config import RunConfig  # noqa: E402
from evoforge.infra.nodes import EVALUATED  # noqa: E402
from evoforge.infra.vllm_server import free_port  # noqa: E402
from evoforge.stages.evaluation import dask_executor  # noqa: E402
from evoforge.stages.evaluation.job import EvalRequest  # noqa: E402
from evoforge.stages.evaluation.prefect_tasks import TaskEvaluations  # noqa: E402
from tests.guard_tasks import make_task  # noqa: E402
from tests.helpers import (  # noqa: E402
    RUN_EVALUATOR,
    prefect_run_of,
    processes_mentioning,
    read_nodes,
    read_status,
)

pytestmark = pytest.mark.slow

SLEEPER = """
import os, time
# EVOLVE-BLOCK-START
def run():
    time.sleep(120)
    return {"combined_score": 1.0}
# EVOLVE-BLOCK-END
"""
EVALUATOR = RUN_EVALUATOR


@pytest.fixture(scope="module")
def scheduler():
    """An existing Dask scheduler with one single-threaded worker process, and a client to it."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield cluster.scheduler_address, client


def _run(tmp_path: Path, *extra: str, evals: int) -> tuple[int, Path]:
    config = tmp_path / "c.yaml"
    config.write_text("cognition:\n  enabled: false\n")
    run_dir = tmp_path / "run"
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--max-evals", str(evals), "--seed", "3", "--quiet", "--no-mlflow", "--config", str(config),
                 "--executor", "dask", *extra])
    return code, run_dir


def _workers_of(run_dir: Path) -> Counter[str]:
    """How many evaluations each worker (host:pid) ran, from the node database."""
    return Counter(n.artifacts["evaluated_on"] for n in read_nodes(run_dir) if n.was_evaluated)


def test_a_run_on_a_local_cluster_evaluates_in_worker_processes(tmp_path):
    code, run_dir = _run(tmp_path, "--workers", "engineer=2", evals=8)
    assert code == 0
    status = read_status(run_dir)
    nodes = read_nodes(run_dir)
    assert status["state"] == "finished" and status["evaluations"] == 8
    evaluated = [n for n in nodes if n.was_evaluated]
    assert len(evaluated) == 8 and len({n.id for n in evaluated}) == 8  # all of them, each once
    assert any(n.status == EVALUATED for n in evaluated if n.origin != "seed")
    workers = _workers_of(run_dir)
    assert sum(workers.values()) == 8
    pids = {int(w.rsplit(":", 1)[1]) for w in workers}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2  # worker processes of the 2-worker cluster
    # the workers reported their task runs to the flow's Prefect API, one per evaluation
    flow_run, names = prefect_run_of(run_dir)
    assert flow_run.state.type.value == "COMPLETED"
    evaluations = Counter(n for n in names if n.startswith("evaluate-"))
    assert set(evaluations) <= {f"evaluate-{n.id}" for n in evaluated}
    assert len(evaluations) >= 6 and set(evaluations.values()) == {1}  # the last records may be lost at exit


def test_a_run_uses_an_existing_scheduler(tmp_path, scheduler):
    address, client = scheduler
    worker_pids = set(client.run(os.getpid).values())
    code, run_dir = _run(tmp_path, "--dask-address", address, evals=4)
    assert code == 0 and read_status(run_dir)["state"] == "finished"
    workers = _workers_of(run_dir)
    assert sum(workers.values()) == 4
    assert {int(w.rsplit(":", 1)[1]) for w in workers} == worker_pids  # the scheduler's own worker


@flow(persist_result=False)
async def _evaluate_and_abort(request: EvalRequest, marker: str) -> list[int]:
    """Start one evaluation on the cluster, wait for its sandboxed child, then abort the run's
    evaluations as a stopping run does; returns the child pids seen."""
    runner = TaskEvaluations("dask")
    job = asyncio.ensure_future(runner.run(request, None))
    children = await _children(marker)
    runner.abort_all()
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):  # cancelled: any other error fails the test
        await job
    return children


async def _children(marker: str, besides: int | None = None) -> list[int]:
    for _ in range(600):
        found = [pid for pid in processes_mentioning(marker) if pid != besides]
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError("the evaluation never started its sandboxed child")


async def _gone(pids: list[int]) -> None:
    for _ in range(300):
        if not _alive(pids):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"sandboxed children {_alive(pids)} outlived their evaluation")


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


def test_aborting_a_dask_evaluation_kills_its_sandboxed_child(tmp_path, scheduler):
    address = scheduler[0]
    task = make_task(tmp_path / "task", program=SLEEPER, evaluator=EVALUATOR, task_yaml=None)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # the child is found by its folder under `scratch`: isolation would move it to the sandbox root
    request = EvalRequest(node_id="abort", code=SLEEPER, task=task,
                          limits=SandboxLimits(timeout_s=300, isolate=False), scratch=scratch)

    async def go() -> list[int]:
        cfg = RunConfig.model_validate({"engine": {"executor": "dask", "dask_address": address}})
        async with dask_executor.dask_environment(cfg):
            flow_fn = _evaluate_and_abort.with_options(task_runner=DaskTaskRunner(address=address))
            return await flow_fn(request, str(scratch))

    children = asyncio.run(go())
    assert children and set(children).isdisjoint({os.getpid()})
    asyncio.run(_gone(children))
    assert processes_mentioning(str(scratch)) == []


PARENT = """
import asyncio, sys
from pathlib import Path
from evoforge.evaluators.sandbox import SandboxLimits, run_sandboxed
asyncio.run(run_sandboxed([sys.executable, "-c", "import time; time.sleep(120)", sys.argv[1]],
                          Path(sys.argv[1]), SandboxLimits(timeout_s=300)))
"""


def test_a_sandboxed_child_dies_with_the_process_that_started_it(tmp_path):
    """A Dask worker killed mid-evaluation (or any evaluating process) takes its child along."""
    marker = tmp_path / "orphan-check"
    marker.mkdir()
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(marker)])
    try:
        children = asyncio.run(_children(str(marker), besides=parent.pid))
        parent.kill()
        parent.wait()
        asyncio.run(_gone(children))
    finally:
        parent.kill()
    assert processes_mentioning(str(marker)) == []


def test_an_unreachable_scheduler_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dask_executor, "SCHEDULER_TIMEOUT_S", 2.0)
    address = f"tcp://127.0.0.1:{free_port()}"
    code, _ = _run(tmp_path, "--dask-address", address, evals=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith(f"evoforge: error: cannot reach the Dask scheduler at {address}")
    assert "Traceback" not in "\n".join(err)


def test_a_remote_scheduler_without_a_prefect_server_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    code, _ = _run(tmp_path, "--dask-address", "tcp://203.0.113.7:8786", evals=2)  # TEST-NET-3
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("evoforge: error: Dask workers behind tcp://203.0.113.7:8786 cannot reach")
    assert "PREFECT_API_URL" in err[-1]


def test_a_dask_address_without_the_dask_executor_is_a_config_error(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("engine:\n  dask_address: tcp://127.0.0.1:8786\n")
    code = main(["run", "circle_packing", "--run-dir", str(tmp_path / "run"), "--config", str(config),
                 "--quiet", "--no-mlflow"])
    assert code == 2
    assert "executor: dask" in capsys.readouterr().err


def test_local_workers_get_every_configured_key_blanked(monkeypatch):
    """Workers never call an LLM: every key variable the config names (infra/llm/keys.py) is blank there."""
    cfg = RunConfig.model_validate({
        "engine": {"executor": "dask", "workers": {"engineer": 1}},
        "llm": {"endpoints": [{"base_url": "http://127.0.0.1:9/v1", "api_key_env": "ROUTER_KEY"}]},
        "analyze": {"llm": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "ANALYZE_KEY"}},
        "task_model": {"llm": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "TASK_MODEL_KEY"}}})
    keys = {"OPENAI_API_KEY": "sk-main", "ROUTER_KEY": "sk-router", "ANALYZE_KEY": "sk-analyze",
            "TASK_MODEL_KEY": "sk-task-model"}
    for name, value in keys.items():
        monkeypatch.setenv(name, value)  # the flow's environment, which worker processes inherit
    monkeypatch.setenv("EVOFORGE_NOT_A_KEY", "kept")
    kwargs = {**dask_executor.dask_task_runner(cfg).cluster_kwargs, "dashboard_address": ":0"}
    names = [*keys, "EVOFORGE_NOT_A_KEY"]
    with LocalCluster(**kwargs) as cluster, Client(cluster) as client:
        seen = client.run(lambda: {name: os.environ.get(name) for name in names})
        pids = set(client.run(os.getpid).values())
    assert len(seen) == 1 and os.getpid() not in pids  # a worker process of its own
    assert next(iter(seen.values())) == {**dict.fromkeys(keys, ""), "EVOFORGE_NOT_A_KEY": "kept"}


def test_only_loopback_scheduler_addresses_count_as_this_machine():
    assert dask_executor.is_local_address("tcp://127.0.0.1:8786")
    assert dask_executor.is_local_address("tcp://localhost:8786")
    assert not dask_executor.is_local_address("tcp://203.0.113.7:8786")
