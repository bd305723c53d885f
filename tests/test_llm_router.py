"""Several LLMs: weighted and bandit routing, per-endpoint keys, and per-model accounting in
status.json, `evoforge status` and MLflow, over two real llm-sim servers."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
import yaml
from mlflow.tracking import MlflowClient

from evoforge.flows.cli import main
from evoforge.flows.commands import status_text
from evoforge.infra.config import ConfigError, LLMConfig, ModelPrice
from evoforge.infra.config_load import load_config
from evoforge.infra.llm.factory import make_backend
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm.router import TOKENS, USD, Router
from evoforge.infra.llm.types import Completion
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sinks.model_usage import ModelUsageTable, gain_over_parent, gains, model_metrics
from tests.helpers import read_nodes, read_status

PRICES = {"cheap": ModelPrice(input_per_mtok=0.1, output_per_mtok=0.4),
          "costly": ModelPrice(input_per_mtok=5.0, output_per_mtok=20.0)}
MESSAGES = [{"role": "user", "content": "## Current program\n```python\nx = 1.0\n```\nAnswer format: diff"}]


def _router(routing: str = "bandit", explore: float = 0.1, seed: int = 0) -> Router:
    endpoints = [(OpenAIBackend("http://a.invalid/v1", "cheap"), 1.0),
                 (OpenAIBackend("http://b.invalid/v1", "costly"), 1.0)]
    return Router(endpoints, routing=routing, prices=PRICES, explore=explore, seed=seed)


def _share(router: Router, model: str, n: int = 2000) -> float:
    return sum(router.pick()[0].model == model for _ in range(n)) / n


def _feed(router: Router, model: str, calls: int, improved: int, cost_per_call: float) -> None:
    arm = router.arms[model]
    arm.answered, arm.cost = calls, calls * cost_per_call
    for i in range(calls):
        router.observe(model, 0.1 if i < improved else -0.1)


def test_weighted_routing_follows_the_weights_and_is_seeded():
    endpoints = [(OpenAIBackend("http://a.invalid/v1", "a"), 3.0),
                 (OpenAIBackend("http://b.invalid/v1", "b"), 1.0)]
    first = Router(endpoints, routing="weighted", seed=7)
    again = Router(endpoints, routing="weighted", seed=7)
    picks = [first.pick()[0].model for _ in range(4000)]
    assert picks == [again.pick()[0].model for _ in range(4000)]
    assert 0.72 < picks.count("a") / len(picks) < 0.78


def test_the_bandit_prefers_the_model_with_more_improvements_per_dollar():
    router = _router()
    assert router.unit == USD  # every model is priced
    _feed(router, "cheap", calls=20, improved=5, cost_per_call=0.001)
    _feed(router, "costly", calls=20, improved=6, cost_per_call=0.02)  # a bit better, 20x the price
    share = _share(router, "cheap")
    assert share > 0.85
    assert _share(router, "costly") > 0.03  # the exploration floor keeps some evidence coming


def test_the_bandit_pays_for_a_model_that_improves_much_more():
    router = _router(explore=0.0)
    _feed(router, "cheap", calls=40, improved=0, cost_per_call=0.001)
    _feed(router, "costly", calls=40, improved=30, cost_per_call=0.002)  # 2x the price, far more gains
    assert _share(router, "costly") > 0.95


def test_failed_calls_count_against_a_model_and_unknown_models_are_ignored():
    router = _router(explore=0.0)
    _feed(router, "cheap", calls=20, improved=4, cost_per_call=0.001)
    _feed(router, "costly", calls=20, improved=4, cost_per_call=0.001)
    for _ in range(200):  # its research calls keep failing: the commit reports each as a miss
        router.observe("cheap", None)
    router.observe("cheap, costly", 1.0)  # a name that is no arm is ignored
    assert _share(router, "costly") > 0.95


def test_without_a_price_for_every_model_the_cost_is_tokens():
    endpoints = [(OpenAIBackend("http://a.invalid/v1", "cheap"), 1.0),
                 (OpenAIBackend("http://b.invalid/v1", "local"), 1.0)]
    assert Router(endpoints, routing="bandit", prices=PRICES).unit == TOKENS


def test_endpoints_and_a_single_base_url_are_one_or_the_other():
    with pytest.raises(ConfigError, match="llm.endpoints replaces llm.base_url"):
        load_config(overrides={"llm.base_url": "http://x/v1",
                               "llm.endpoints": [{"base_url": "http://y/v1"}]}, environ={})


def test_an_endpoint_key_variable_that_is_not_set_is_a_config_error(monkeypatch):
    monkeypatch.delenv("EVOFORGE_TEST_NO_SUCH_KEY", raising=False)
    cfg = LLMConfig(endpoints=[{"base_url": "http://y/v1", "api_key_env": "EVOFORGE_TEST_NO_SUCH_KEY"}])
    with pytest.raises(ConfigError, match="EVOFORGE_TEST_NO_SUCH_KEY is not set"):
        make_backend(cfg, 0)


def test_model_usage_counts_calls_tokens_cost_and_improvements():
    parent = Node(id="p", run_id="r", code="", status=EVALUATED, score_full=2.0, origin="seed")
    better = Node(id="a", run_id="r", code="", parent_id="p", status=EVALUATED, score_full=1.5,
                  model="cheap", tokens_in=1_000_000, tokens_out=500_000, llm_s=2.0)
    broken = Node(id="b", run_id="r", code="", parent_id="p", status=FAILED, model="costly",
                  tokens_in=10, tokens_out=10, llm_s=1.0)
    table = ModelUsageTable(PRICES)
    assert gain_over_parent(parent, None, "full", maximize=False) is None
    assert gain_over_parent(better, parent, "full", maximize=False) == pytest.approx(0.5)  # lower: better
    assert gain_over_parent(broken, parent, "full", maximize=False) is None
    for node, parent_node in ((parent, None), (better, parent), (broken, parent)):
        table.count(node, gain_over_parent(node, parent_node, "full", maximize=False))
    rows = table.as_dict()
    assert set(rows) == {"cheap", "costly"}  # the seed is nobody's design
    assert rows["cheap"]["improvements"] == 1 and rows["costly"]["improvements"] == 0
    assert rows["cheap"]["cost_usd"] == pytest.approx(0.1 + 0.2)
    assert rows["cheap"]["llm_s_per_candidate"] == 2.0
    assert ModelUsageTable.rebuild([parent, better, broken], "full", False, PRICES).as_dict() == rows
    assert model_metrics(rows)["model.cheap.tokens_in"] == 1_000_000


def test_a_resumed_bandit_learns_again_from_the_node_database():
    pool = Pool(maximize=True)
    seed = Node(id="s", run_id="r", code="", status=EVALUATED, score_full=1.0, origin="seed")
    pool.add(seed)
    nodes = [seed]
    for i in range(10):  # cheap's designs all beat the seed, costly's never do
        nodes.append(Node(id=f"c{i}", run_id="r", code="", parent_id="s", status=EVALUATED,
                          score_full=1.5, model="cheap"))
        nodes.append(Node(id=f"x{i}", run_id="r", code="", parent_id="s", status=FAILED, model="costly"))
    router = _router(explore=0.0)
    for node, gain in gains(nodes, "full", maximize=True):  # what a resumed session tells the router
        if node.origin != "seed":
            router.observe(node.model, gain)
    assert (router.arms["cheap"].designs, router.arms["cheap"].improvements) == (10, 10)
    assert (router.arms["costly"].designs, router.arms["costly"].improvements) == (10, 0)
    assert _share(router, "cheap") > 0.95  # what the run had learnt, before any new call


def test_status_text_has_one_line_per_model_when_there_are_several():
    base = {"task": "t", "evaluations": 3, "candidates_per_min": 1.0, "wall_s": 1.0, "tokens_in": 5,
            "tokens_out": 6}
    row = {"calls": 2, "improvements": 1, "tokens_in": 5, "tokens_out": 6, "llm_s_per_candidate": 0.5}
    two = status_text({**base, "models": {"a": {**row, "cost_usd": 0.25}, "b": {**row, "cost_usd": None}}})
    lines = [line for line in two.splitlines() if line.startswith("model ")]
    figures = "2 calls, 1 improved, 5 in / 6 out tokens, 0.5 LLM s/candidate"
    assert lines == [f"model         a: {figures}, $0.2500", f"model         b: {figures}, no price"]
    one = status_text({**base, "models": {"a": {**row, "cost_usd": 0.25}}})
    assert not [line for line in one.splitlines() if line.startswith("model ")]


def _sims(**kw):
    return (SimulatorProcess(SimConfig(model="cheap", median_s=0.02, sigma=0.2, slots=4, seed=1, **kw)),
            SimulatorProcess(SimConfig(model="costly", median_s=0.02, sigma=0.2, slots=4, seed=2, **kw)))


def test_weighted_router_over_two_servers_sends_each_its_share_with_its_own_key(monkeypatch):
    monkeypatch.setenv("EVOFORGE_TEST_KEY_A", "key-for-a")
    monkeypatch.setenv("OPENAI_API_KEY", "the-default-key")
    sim_a, sim_b = _sims()
    with sim_a, sim_b:
        cfg = LLMConfig(endpoints=[
            {"base_url": sim_a.base_url, "model": "cheap", "weight": 3, "api_key_env": "EVOFORGE_TEST_KEY_A"},
            {"base_url": sim_b.base_url, "weight": 1}])  # model: the server's first
        router = make_backend(cfg, seed=4)

        async def calls() -> list[Completion]:
            described = await router.check()
            assert "cheap at" in described and "costly at" in described
            try:
                return [await router.complete(MESSAGES, temperature=0.8, max_tokens=512) for _ in range(80)]
            finally:
                await router.close()

        answers = asyncio.run(calls())
        a, b = sim_a.stats(), sim_b.stats()
    models = [c.model for c in answers]
    assert models.count("cheap") == a["completed"] and models.count("costly") == b["completed"]
    assert a["completed"] > 2 * b["completed"] > 0  # 3:1 by weight, both used
    assert a["api_key_sha256"] == [hashlib.sha256(b"key-for-a").hexdigest()[:16]]
    assert b["api_key_sha256"] == [hashlib.sha256(b"EMPTY").hexdigest()[:16]]  # no main URL: no main key


@pytest.mark.slow
def test_a_bandit_run_favours_the_cheaper_model_and_records_per_model_figures(tmp_path, capsys):
    sim_a, sim_b = _sims()
    with sim_a, sim_b:
        config = tmp_path / "llms.yaml"
        config.write_text(yaml.safe_dump({
            "cognition": {"enabled": False},
            "llm": {"endpoints": [{"base_url": sim_a.base_url, "model": "cheap"},
                                  {"base_url": sim_b.base_url, "model": "costly"}],
                    "routing": "bandit", "explore": 0.1,
                    "prices": {k: v.model_dump() for k, v in PRICES.items()}}}))
        run_dir = tmp_path / "run"
        code = main(["run", "circle_packing", "--config", str(config), "--run-dir", str(run_dir),
                     "--workspace", str(tmp_path / "ws"), "--max-evals", "30", "--seed", "2",
                     "--workers", "research=2,engineer=2", "--quiet"])
        assert code == 0
        served = {"cheap": sim_a.stats()["completed"], "costly": sim_b.stats()["completed"]}
    status = read_status(run_dir)
    models = status["models"]
    assert set(models) == {"cheap", "costly"}
    assert served["cheap"] > 2 * served["costly"]  # same quality, 50x the price: the bandit moved away
    assert models["cheap"]["calls"] > 2 * models["costly"]["calls"]
    nodes = [n for n in read_nodes(run_dir) if n.origin != "seed"]
    for name, row in models.items():
        mine = [n for n in nodes if n.model == name]
        assert row["calls"] == len(mine) and row["tokens_in"] == sum(n.tokens_in for n in mine) > 0
        price = PRICES[name]
        usd = (row["tokens_in"] * price.input_per_mtok + row["tokens_out"] * price.output_per_mtok) / 1e6
        assert row["cost_usd"] == pytest.approx(usd, abs=1e-6) and usd > 0
    assert sum(r["tokens_in"] for r in models.values()) == status["tokens_in"]
    main(["status", str(run_dir)])
    text = capsys.readouterr().out
    assert "model         cheap: " in text and "model         costly: " in text
    client = MlflowClient(f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("evoforge/circle_packing")
    parent = next(r for r in client.search_runs([exp.experiment_id], max_results=1000)
                  if not r.data.tags.get("mlflow.parentRunId"))
    assert parent.data.metrics["model.cheap.tokens_in"] == models["cheap"]["tokens_in"]
    assert parent.data.metrics["model.costly.cost_usd"] == pytest.approx(models["costly"]["cost_usd"])


def test_a_failed_call_names_the_model_it_was_routed_to():
    from evoforge.infra.llm.types import LLMError

    # a server that answers with a body that is not JSON: the call fails (a server that does not
    # answer at all is an outage instead, which the circuit waits out: tests/test_llm_faults.py)
    with SimulatorProcess(SimConfig(median_s=0.01, error_rate=1.0, error_kinds=("bad_json",))) as sim:
        broken = OpenAIBackend(sim.base_url, "costly", max_retries=0, timeout_s=2)
        router = Router([(broken, 1.0)], routing="weighted")
        with pytest.raises(LLMError) as failed:
            asyncio.run(router.complete(MESSAGES, temperature=0.5, max_tokens=64))
    assert failed.value.model == "costly" and "costly at http://127.0.0.1" in str(failed.value)
