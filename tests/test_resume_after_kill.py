"""A run killed mid-flight resumes: nothing evaluated is lost, nothing is evaluated twice,
proposals that were in flight are evaluated after the restart, nothing it started outlives it
(its Prefect server, its evaluation children), and Ctrl+C stops cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.crash_kills import leftovers, note_children
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED, PROPOSED
from tests.helpers import cli_env, read_nodes, read_status, run_cli

pytestmark = pytest.mark.slow


def _start(args: list[str], tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evoforge.flows.cli", *args], cwd=tmp_path,
                            env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for_evaluations(run_dir: Path, count: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        status = run_dir / "status.json"
        if status.exists():
            try:
                if read_status(run_dir)["evaluations"] >= count:
                    return
            except (ValueError, KeyError):
                pass
        time.sleep(0.2)
    raise AssertionError(f"the run did not reach {count} evaluations in {timeout} s")


def test_kill_9_then_rerun_finishes_the_budget_exactly(tmp_path):
    run_dir = tmp_path / "run"
    with SimulatorProcess(SimConfig(median_s=0.3, sigma=0.3, slots=8, seed=2)) as sim:
        args = ["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                "--llm-base-url", sim.base_url, "--max-evals", "30", "--workers",
                "research=6,engineer=2", "--seed", "4"]
        proc = _start(args, tmp_path)
        _wait_for_evaluations(run_dir, 8, proc)
        children: dict = {}
        note_children(proc.pid, children)
        servers = [pid for pid in children if b"uvicorn" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(servers) == 1  # its ephemeral Prefect server is running
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # its Prefect server, watchdog and evaluation children go with it (they carry its
        # PREFECT_HOME, or were its children, or are in a session one of them led)
        left = leftovers(tmp_path / "prefect-home", children)
        assert left == []
        before = read_nodes(run_dir)
        evaluated_before = {n.id: n.evaluated_at for n in before if n.was_evaluated}
        in_flight = {n.id for n in before if n.status == PROPOSED}
        done = run_cli(args, tmp_path)
    assert done.returncode == 0, done.stderr
    after = read_nodes(run_dir)
    by_id = {n.id: n for n in after}
    assert sum(n.was_evaluated for n in after) == 30
    for node_id, when in evaluated_before.items():  # not lost, not evaluated again
        assert by_id[node_id].evaluated_at == when
    assert all(by_id[i].status != PROPOSED for i in in_flight)  # re-queued and finished,
    copies = [i for i in in_flight if f"duplicate of node {i}" in (by_id[i].error or "")]
    assert copies == []  # and not rejected as a duplicate of itself
    assert not [n for n in after if n.status == PROPOSED]
    status = read_status(run_dir)
    assert status["state"] == "finished" and status["evaluations"] == 30


def test_ctrl_c_stops_cleanly_and_the_run_resumes(tmp_path):
    run_dir = tmp_path / "run"
    args = ["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
            "--max-evals", "400", "--no-mlflow", "--seed", "6"]
    proc = _start(args, tmp_path)
    _wait_for_evaluations(run_dir, 5, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "stopping" in err
    status = read_status(run_dir)
    assert status["state"] == "interrupted"
    nodes = read_nodes(run_dir)  # the database opens: consistent and unlocked
    assert status["evaluations"] == sum(n.was_evaluated for n in nodes)
    assert any(n.status == EVALUATED for n in nodes)
