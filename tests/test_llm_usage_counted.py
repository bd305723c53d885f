"""Every answer whose response carries `usage` is counted, an answer cut off at max_tokens too: on
the node that made the call, in the run's spending (tokens and dollars) and toward its budgets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.infra.config import ModelPrice
from evoforge.infra.llm.openai_backend import LLMAnswerError, OpenAIBackend
from evoforge.infra.llm.spending import Spending
from tests.helpers import read_nodes, read_status
from tests.usage_server import CutOffServer

PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}  # USD per million tokens
USAGE = (1234, 567)  # what the server reports for every (cut-off) answer


def _cost(tokens_in: int, tokens_out: int) -> float:
    return (tokens_in * PRICE["input_per_mtok"] + tokens_out * PRICE["output_per_mtok"]) / 1e6


def test_a_cut_off_answer_raises_with_the_servers_usage_and_is_charged() -> None:
    spend = Spending(None, {"cutoff-model": ModelPrice(**PRICE)})

    async def ask() -> LLMAnswerError:
        backend = OpenAIBackend(server.base_url, "cutoff-model", spending=spend)
        try:
            with pytest.raises(LLMAnswerError, match="cut off at max_tokens=64") as caught:
                await backend.complete([{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=64)
            return caught.value
        finally:
            await backend.close()

    with CutOffServer(usage=USAGE) as server:
        error = asyncio.run(ask())
        assert server.calls == 2  # cut off, asked once more with more room, cut off again
    both = (2 * USAGE[0], 2 * USAGE[1])  # the two calls' usage
    assert (error.tokens_in, error.tokens_out) == both
    assert (spend.tokens_in, spend.tokens_out, spend.calls) == (*both, 2)
    assert spend.spent_usd == pytest.approx(_cost(*both))
    assert spend.reserved_usd == 0.0  # no cap: nothing held; with one, the hold is released


def test_a_run_whose_answers_are_all_cut_off_records_exactly_the_servers_usage(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"llm": {"prices": {"cutoff-model": PRICE}}}))
    run_dir = tmp_path / "run"
    with CutOffServer(usage=USAGE) as server:
        code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--config", str(config), "--llm-base-url", server.base_url,
                     "--llm-model", "cutoff-model", "--max-evals", "3", "--seed", "1", "--quiet",
                     "--no-mlflow"])
        served = (server.calls, server.tokens_in, server.tokens_out)
    assert code == 0
    status, nodes = read_status(run_dir), read_nodes(run_dir)
    cut = [n for n in nodes if n.error and "cut off at max_tokens" in n.error]
    assert cut and served[0] >= len(cut)
    # each cut-off research call was asked once more: its node holds both calls' usage
    assert all((n.tokens_in, n.tokens_out) == (2 * USAGE[0], 2 * USAGE[1])
               for n in cut if n.failed_stage == "research")
    assert (status["tokens_in"], status["tokens_out"]) == (sum(n.tokens_in for n in nodes),
                                                           sum(n.tokens_out for n in nodes))
    spending = status["spending"]
    assert (spending["calls"], spending["tokens_in"], spending["tokens_out"]) == served
    assert spending["spent_usd"] == pytest.approx(_cost(served[1], served[2]), rel=1e-6)
    assert json.loads((run_dir / "spending.json").read_text())["tokens_out"] == served[2]


def test_cut_off_answers_count_toward_max_tokens(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with CutOffServer(usage=USAGE) as server:
        code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--llm-base-url", server.base_url, "--llm-model", "cutoff-model", "--max-evals", "50",
                     "--max-tokens", "5000", "--seed", "1", "--quiet", "--no-mlflow"])
    status = read_status(run_dir)
    assert code == 0
    assert status["stop_reason"] == "max_tokens reached"  # not the proposal cap (200 failed proposals)
    assert status["proposals"] < 200 and status["tokens_in"] + status["tokens_out"] >= 5000
