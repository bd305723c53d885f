"""budget.max_cost_usd covers the run over all its sessions: a resumed run starts from what its
earlier sessions spent (spending.json in the run folder), and with each call's worst case
reserved before it is sent the run's spending never crosses the cap, default workers in flight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.flows.commands import status_text
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from tests.helpers import read_nodes, read_status

PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}  # USD per million tokens
CAP = 0.05  # a few calls: each costs about $0.005, its worst case (1,024 tokens out) about $0.012
MAX_TOKENS = 1024


def _session(tmp_path: Path, sim: SimulatorProcess, evals: int) -> dict:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"llm": {"prices": {"evoforge-sim": PRICE}, "max_tokens": MAX_TOKENS},
                                  "budget": {"max_cost_usd": CAP}}))
    run_dir = tmp_path / "run"
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", str(evals),
                 "--seed", "4", "--quiet", "--no-mlflow"])  # default workers: 8 research calls at once
    assert code == 0
    return read_status(run_dir)


def test_two_sessions_of_a_run_spend_at_most_its_cap_and_the_second_starts_from_the_first(
        tmp_path: Path) -> None:
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.3, slots=8, seed=3)) as sim:
        first = _session(tmp_path, sim, evals=2)
        kept = json.loads((tmp_path / "run" / "spending.json").read_text())
        second = _session(tmp_path, sim, evals=200)
    spent1, run = first["spending"]["spent_usd"], second["spending"]
    assert first["stop_reason"].startswith("max_evals reached")
    assert 0 < spent1 < CAP and kept["spent_usd"] == pytest.approx(spent1)
    assert run["session"]["spent_usd"] == pytest.approx(run["spent_usd"] - spent1, abs=1e-6)  # restored
    assert run["session"]["spent_usd"] > 0
    assert run["calls"] == first["spending"]["calls"] + run["session"]["calls"]
    assert second["stop_reason"].startswith("max_cost_usd reached")
    assert second["evaluations"] < 200  # the cap, not max_evals, ended it
    assert run["spent_usd"] <= CAP  # over both sessions, with 8 calls in flight
    worst_out = MAX_TOKENS * PRICE["output_per_mtok"] / 1e6
    assert CAP - run["spent_usd"] < 2 * worst_out  # stopped because a call's worst case did not fit
    nodes = read_nodes(tmp_path / "run")
    charged = sum(n.tokens_in * PRICE["input_per_mtok"] + n.tokens_out * PRICE["output_per_mtok"]
                  for n in nodes) / 1e6
    assert charged <= CAP and charged == pytest.approx(run["spent_usd"], rel=0.05)
    text = status_text(second)
    assert f"spent         ${run['spent_usd']:.4f} of ${CAP:.4f}" in text
    assert f"this session ${run['session']['spent_usd']:.4f}" in text
