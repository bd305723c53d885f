"""The API key reaches the LLM server and nothing else: not Prefect's database, not MLflow, not
the run folder, not the logs, not the node database."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from evoforge.infra.config_load import load_config
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED
from tests.helpers import cli_env, read_nodes, run_cli

pytestmark = pytest.mark.slow

CANARY = "sk-evoforge-canary-7f3a9c1e5b2d"


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def test_the_api_key_is_used_but_never_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    env = cli_env(tmp_path)
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.2, slots=4, seed=1)) as sim:
        run_dir = tmp_path / "run"
        args = ["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                "--llm-base-url", sim.base_url, "--max-evals", "6", "--seed", "1"]
        done = run_cli(args, tmp_path)
        seen = sim.stats()["api_key_sha256"]
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(CANARY.encode()).hexdigest()[:16] in seen  # the key was really sent
    assert [n for n in read_nodes(run_dir) if n.status == EVALUATED and n.backend == "openai"]
    prefect_db = Path(env["PREFECT_HOME"]) / "prefect.db"
    assert prefect_db.is_file() and (tmp_path / "ws" / "mlflow.db").is_file()
    assert _files_containing(tmp_path, CANARY.encode()) == []
    assert CANARY not in done.stdout + done.stderr


def test_the_key_is_left_out_of_every_dump_of_the_config():
    cfg = load_config(environ={"OPENAI_API_KEY": CANARY})
    assert cfg.llm.secret_key() == CANARY
    assert CANARY not in repr(cfg) + str(cfg.model_dump()) + cfg.model_dump_json()
    assert "api_key" not in cfg.public_dict()["llm"]
