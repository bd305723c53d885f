"""Prefect's temporary server writes to the run's log, not to the terminal the run started from."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import cli_env, read_status

pytestmark = pytest.mark.slow

_PROBE = """
import json, os, sys
from pathlib import Path
from evoforge.infra.prefect_server import needs_temporary_server, start_temporary_server
before = os.readlink("/proc/self/fd/2")
assert needs_temporary_server()
server = start_temporary_server(Path(sys.argv[1]))
pid = server.server_process.pid
print(json.dumps({"server_fd2": os.readlink(f"/proc/{pid}/fd/2"),
                  "server_fd1": os.readlink(f"/proc/{pid}/fd/1"),
                  "own_fd2_before": before, "own_fd2_after": os.readlink("/proc/self/fd/2"),
                  "patched_left": "_run_uvicorn_command" in server.__dict__,
                  "health": __import__("httpx").get(server.api_url + "/health").status_code}))
server.stop()
"""


def test_the_temporary_server_writes_to_the_given_log_and_this_process_keeps_its_terminal(tmp_path):
    log = tmp_path / "run" / "run.log"
    env = cli_env(tmp_path)
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run([sys.executable, "-c", _PROBE, str(log)], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["server_fd2"] == str(log) and seen["server_fd1"] == str(log)
    assert seen["own_fd2_after"] == seen["own_fd2_before"] != str(log)
    assert seen["patched_left"] is False and seen["health"] == 200


def test_a_cli_run_leaves_the_terminal_to_evoforge_and_the_server_output_in_run_log(tmp_path):
    # the server at DEBUG says hundreds of lines (its services starting, each event it records):
    # without evoforge starting it, they all reach the terminal (measured: 736 lines, 0 in run.log)
    run_dir = tmp_path / "run"
    env = cli_env(tmp_path)
    env.pop("PREFECT_API_URL", None)
    env["PREFECT_SERVER_LOGGING_LEVEL"] = "DEBUG"
    done = subprocess.run(
        [sys.executable, "-m", "evoforge.flows.cli", "run", "circle_packing", "--run-dir", str(run_dir),
         "--workspace", str(tmp_path / "ws"), "--max-evals", "6", "--no-mlflow", "--quiet"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_status(run_dir)["evaluations"] == 6
    assert "Traceback" not in done.stderr and "prefect.server" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("[evoforge]") for ln in lines), lines[:5]
    assert (run_dir / "run.log").read_text().count("prefect.server") >= 50
