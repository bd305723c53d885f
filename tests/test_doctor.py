"""`evoforge doctor` says, one line per part, what this machine gives a run, and exits 1 when a
part the config needs is missing (run as a user would, in a subprocess)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig
from tests.helpers import cli_env
from tests.unprivileged import ensure_user, make_home, run_as_user, user_env

SECRET = "sk-doctor-secret-4711"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def doctor(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
           config: str = "cognition: {embedding: lexical}\n") -> tuple[int, dict[str, dict], str]:
    """Run `evoforge doctor --json`; its checks by part, and its stderr."""
    (tmp_path / "c.yaml").write_text(config)
    done = subprocess.run([sys.executable, "-m", "evoforge.flows.cli", "doctor", "--json",
                           "--config", str(tmp_path / "c.yaml"), "--workspace", str(tmp_path / "ws"), *args],
                          cwd=tmp_path, env={**cli_env(tmp_path), **(env or {})}, capture_output=True,
                          text=True, timeout=300)
    assert SECRET not in done.stdout + done.stderr
    checks = {c["part"]: c for c in json.loads(done.stdout)} if done.stdout.strip() else {}
    return done.returncode, checks, done.stderr


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.1, seed=5)) as process:
        yield process


def test_every_part_has_a_line_and_nothing_needed_is_missing_here(tmp_path):
    code, checks, err = doctor(tmp_path)
    assert code == 0, (checks, err)
    assert list(checks) == ["isolation", "processes", "embedder", "llm", "prefect", "mlflow", "disk", "dask"]
    isolation = checks["isolation"]
    assert isolation["state"] == "ok"
    assert isolation["detail"].startswith("root-uid: " if os.geteuid() == 0 else "userns: ")
    assert checks["embedder"]["state"] == "ok" and "lexical" in checks["embedder"]["detail"]
    assert checks["llm"]["state"] == "off" and "offline proposer" in checks["llm"]["detail"]
    assert checks["mlflow"]["detail"].startswith(f"sqlite:///{(tmp_path / 'ws').resolve()}")
    assert checks["disk"]["state"] in ("ok", "warn") and "GiB free at" in checks["disk"]["detail"]
    assert checks["dask"]["state"] == "off"


def test_the_plain_lines_are_one_per_part(tmp_path):
    (tmp_path / "c.yaml").write_text("cognition: {enabled: false}\ntracking: {mlflow: false}\n")
    done = subprocess.run([sys.executable, "-m", "evoforge.flows.cli", "doctor", "--config",
                           str(tmp_path / "c.yaml")], cwd=tmp_path, env=cli_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 8
    assert lines[2].split() == ["off", "embedder", "cognition.enabled:", "false"]
    assert lines[5].split()[:2] == ["off", "mlflow"]


def test_an_unreachable_llm_and_prefect_api_are_missing_and_exit_1(tmp_path):
    llm, api = _closed_port(), _closed_port()
    env = {"PREFECT_API_URL": f"http://127.0.0.1:{api}/api", "OPENAI_API_KEY": SECRET}
    code, checks, err = doctor(tmp_path, "--llm-base-url", f"http://127.0.0.1:{llm}/v1", env=env)
    assert code == 1
    assert checks["llm"]["state"] == "MISSING"
    assert f"127.0.0.1:{llm}/v1: unreachable" in checks["llm"]["detail"]
    assert checks["prefect"]["state"] == "MISSING" and f"127.0.0.1:{api}/api" in checks["prefect"]["detail"]
    assert "missing what the config needs: llm, prefect" in err


def test_a_live_endpoint_lists_its_models_and_the_key_stays_out_of_the_output(tmp_path, sim):
    code, checks, err = doctor(tmp_path, "--llm-base-url", sim.base_url, env={"OPENAI_API_KEY": SECRET})
    assert code == 0, err
    assert checks["llm"]["state"] == "ok" and checks["llm"]["detail"].startswith(sim.base_url)
    assert "no models listed" not in checks["llm"]["detail"]


def test_isolation_turned_off_and_an_unreachable_dask_scheduler(tmp_path):
    port = _closed_port()
    config = (f"cognition: {{embedding: lexical}}\nsandbox: {{isolate: false}}\n"
              f"engine: {{executor: dask, dask_address: 'tcp://127.0.0.1:{port}'}}\n")
    code, checks, err = doctor(tmp_path, config=config)
    assert checks["isolation"]["state"] == "off"
    assert checks["dask"]["state"] == "MISSING" and f"127.0.0.1:{port}" in checks["dask"]["detail"]
    assert code == 1 and "missing what the config needs: dask" in err


def test_a_bad_config_is_one_line_and_exit_2(tmp_path):
    code, checks, err = doctor(tmp_path, config="sandbox: {isolate: maybe}\n")
    assert code == 2 and checks == {}
    assert err.strip().count("\n") == 0 and "sandbox.isolate" in err


@pytest.mark.parametrize("forbid", [False, True], ids=["userns", "userns-forbidden"])
def test_as_an_ordinary_user_it_names_the_isolation_kind_or_what_is_missing(forbid):
    if os.geteuid() != 0:  # CI runs as root: there this never skips
        pytest.skip("the unprivileged doctor test makes a user: run it as root")
    home = make_home(ensure_user())
    config = home / "c.yaml"
    config.write_text("cognition: {enabled: false}\n")
    done = run_as_user([sys.executable, "-m", "evoforge.flows.cli", "doctor", "--config", str(config),
                        "--workspace", str(home / "ws")], home, env=user_env(home), forbid_userns=forbid)
    isolation = next(line for line in done.stdout.splitlines() if line.split()[1:2] == ["isolation"])
    if forbid:  # no LLM key in the user's environment: a run goes ahead with its notice, so: warn
        assert done.returncode == 0 and isolation.startswith("warn     isolation  none: "), done.stdout
        assert "user.max_user_namespaces = 0: sysctl -w user.max_user_namespaces=15000" in isolation
        assert "a run goes ahead unisolated while no LLM key is in its environment" in isolation
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        assert isolation.startswith("ok       isolation  userns: ")
