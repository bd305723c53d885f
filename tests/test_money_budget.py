"""budget.max_cost_usd: each LLM call reserves its worst case (priced by llm.prices) before it is
sent and settles to the server's usage after, so a run stops on its cap without crossing it, calls in
flight included; status shows spent and left; a cap with a model the price table does not name is a
one-line error at start (exit 2)."""

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
RESEARCH, ANALYZE = 4, 2  # LLM workers: calls in flight, each holding its worst case


def test_a_call_is_refused_once_the_cap_is_spent_and_only_then() -> None:
    spend = Spending(0.001, {"m": ModelPrice(**PRICE)})
    spend.check()  # nothing spent: the call goes
    spend.add("m", 10, 10)
    spend.check()  # $0.0001 of $0.001: still goes
    spend.add("m", 400, 100)  # $0.0016 more: over the cap (a call charged without a reservation)
    with pytest.raises(SpendingCapReached, match=r"budget.max_cost_usd reached \(\$0.0017 of \$0.0010"):
        spend.check()
    assert spend.status() == {"spent_usd": 0.0017, "cap_usd": 0.001, "left_usd": 0.0, "calls": 2,
                              "tokens_in": 410, "tokens_out": 110, "reserved_usd": 0.0,
                              "session": {"spent_usd": 0.0017, "calls": 2, "tokens_in": 410,
                                          "tokens_out": 110}}
    with pytest.raises(ConfigError, match="no price for model 'other'"):
        spend.require_prices(["m", "other"])
    Spending(None, {}).require_prices(["anything"])  # no cap: prices are not required


def test_a_call_reserves_its_worst_case_and_settles_to_the_servers_usage() -> None:
    spend = Spending(0.01, {"m": ModelPrice(**PRICE)})
    prompt = [{"role": "user", "content": "x" * 2_992}]  # 998 + 8 = 1,006 tokens estimated
    worst = (1_006 * 2.0 + 500 * 8.0) / 1e6  # $0.006012
    held = spend.reserve("m", prompt, max_tokens=500)
    assert held == pytest.approx(worst)
    assert spend.reserve("m", prompt, max_tokens=500) is None  # fits alone, not beside the first: waits
    spend.settle(held, "m", 800, 100)  # the server counted less than the worst case
    assert (spend.reserved_usd, spend.spent_usd) == (0.0, pytest.approx(0.0024))
    second = spend.reserve("m", prompt, max_tokens=500)  # $0.0024 + $0.0060 fits in $0.01
    spend.settle(second, "m", 1_000, 500)  # $0.006: $0.0084 spent
    assert not spend.exhausted
    with pytest.raises(SpendingCapReached, match=r"\$0.0084 of \$0.0100 spent; this call could cost "
                                                 r"\$0.0060"):
        spend.reserve("m", prompt, max_tokens=500)
    assert spend.exhausted and spend.spent_usd <= 0.01  # refused, never sent: the run stops here


def _run(tmp_path: Path, sim: SimulatorProcess, config: dict, evals: int = 200) -> tuple[int, Path]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    run_dir = tmp_path / "run"
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--config", str(path), "--llm-base-url", sim.base_url, "--max-evals", str(evals),
                 "--workers", f"research={RESEARCH},engineer=2,analyze={ANALYZE}", "--seed", "4",
                 "--quiet", "--no-mlflow"])
    return code, run_dir


def test_the_run_stops_at_its_money_cap_without_crossing_it(tmp_path: Path) -> None:
    cap, max_tokens = 0.02, 1024  # a call's worst case: about $0.003 in + $0.008 out
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.3, slots=8, seed=2)) as sim:
        llm = {"prices": {"evoforge-sim": PRICE}, "max_tokens": max_tokens}
        code, run_dir = _run(tmp_path, sim, {"llm": llm, "budget": {"max_cost_usd": cap}})
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
    assert 0 < spent <= cap  # the calls in flight held their worst case: none crossed the cap
    assert cap - spent < 2 * max_tokens * PRICE["output_per_mtok"] / 1e6  # it stopped for lack of money
    assert status["spending"]["calls"] <= answered
    refused = [n for n in nodes if n.error and "budget.max_cost_usd reached" in n.error]
    assert refused and all(n.tokens_in == 0 for n in refused)  # a refused call was never sent
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
