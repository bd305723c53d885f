"""budget.max_cost_usd: the LLM calls' dollars (priced by llm.prices) are checked before each call
is sent, so a run stops within the calls in flight of its cap; status shows spent and left; a cap
with a model the price table does not name is a one-line error at start (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.flows.commands import status_text
from evoforge.infra.config import ConfigError, ModelPrice
from evoforge.infra.llm.spending import Spending, SpendingCapReached
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from tests.helpers import read_nodes, read_status

PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}  # USD per million tokens
RESEARCH, ANALYZE = 4, 2  # LLM workers: the most calls in flight when the cap is reached


def test_a_call_is_refused_once_the_cap_is_spent_and_only_then() -> None:
    spend = Spending(0.001, {"m": ModelPrice(**PRICE)})
    spend.check()  # nothing spent: the call goes
    spend.add("m", 10, 10)
    spend.check()  # $0.0001 of $0.001: still goes
    spend.add("m", 400, 100)  # $0.0016 more: over the cap (the call was already sent)
    with pytest.raises(SpendingCapReached, match=r"budget.max_cost_usd reached \(\$0.0017 of \$0.0010"):
        spend.check()
    assert spend.status() == {"spent_usd": 0.0017, "cap_usd": 0.001, "left_usd": 0.0, "calls": 2}
    with pytest.raises(ConfigError, match="no price for model 'other'"):
        spend.require_prices(["m", "other"])
    Spending(None, {}).require_prices(["anything"])  # no cap: prices are not required


def _run(tmp_path: Path, sim: SimulatorProcess, config: dict, evals: int = 200) -> tuple[int, Path]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    run_dir = tmp_path / "run"
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--config", str(path), "--llm-base-url", sim.base_url, "--max-evals", str(evals),
                 "--workers", f"research={RESEARCH},engineer=2,analyze={ANALYZE}", "--seed", "4",
                 "--quiet", "--no-mlflow"])
    return code, run_dir


def test_the_run_stops_at_its_money_cap_overrunning_by_the_calls_in_flight_at_most(tmp_path: Path) -> None:
    cap = 0.02
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.3, slots=8, seed=2)) as sim:
        code, run_dir = _run(tmp_path, sim, {"llm": {"prices": {"evoforge-sim": PRICE}},
                                             "budget": {"max_cost_usd": cap}})
        answered = sim.stats()["completed"]
    assert code == 0
    status = read_status(run_dir)
    assert status["stop_reason"].startswith("max_cost_usd reached")
    assert status["evaluations"] < 200  # the cap, not max_evals, ended it
    spent = status["spending"]["spent_usd"]
    nodes = read_nodes(run_dir)
    per_node = [(n.tokens_in * PRICE["input_per_mtok"] + n.tokens_out * PRICE["output_per_mtok"]) / 1e6
                for n in nodes]
    assert spent == pytest.approx(sum(per_node), rel=0.05)  # what the nodes were charged, counted once
    assert cap <= spent <= cap + (RESEARCH + ANALYZE) * max(per_node)  # a node's calls >= one call
    assert status["spending"]["calls"] <= answered
    refused = [n for n in nodes if n.error and "budget.max_cost_usd reached" in n.error]
    assert all(n.tokens_in == 0 for n in refused)  # a refused call was never sent
    assert f"spent         ${spent:.4f} of ${cap:.4f}" in status_text(status)


def test_a_cap_with_an_unpriced_model_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.3, slots=2)) as sim:
        code, run_dir = _run(tmp_path, sim, {"llm": {"prices": {"another-model": PRICE}},
                                             "budget": {"max_cost_usd": 1.0}}, evals=5)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].endswith("budget.max_cost_usd: llm.prices has no price for model 'evoforge-sim'")
    assert "Traceback" not in "\n".join(err)
    assert not any(n.origin != "seed" for n in (read_nodes(run_dir) if (run_dir / "nodes.duckdb").exists()
                                                 else []))
