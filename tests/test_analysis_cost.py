"""What analysis costs in LLM calls is a setting: a share of the candidates (by node id, stable
on resume), several candidates per call (a report each, the cost shared), or another endpoint."""

from __future__ import annotations

import asyncio

import pytest

from evoforge.flows.cli import main
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.types import Completion
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.llm_traces import recording
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.prompt_format import split_analysis_requests
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.analyze import ANALYSIS_BY, Analyze, chosen
from evoforge.stages.population.item import Item
from tests.helpers import read_nodes, read_status
from tests.test_analyze import _setup


class Counting(OfflineBackend):
    """The offline analyzer, counting its calls and the candidates each was about."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    async def complete(self, messages, **kw) -> Completion:
        self.calls.append(len(split_analysis_requests(messages[-1]["content"])) or 1)
        return await super().complete(messages, **kw)


def _items(n: int, cfg: RunConfig, llm) -> tuple[list[Item], object]:
    items = []
    for i in range(n):
        item, ctx = _setup(llm, cfg)
        item.node = item.node.copy(id=f"c{i:011d}", llm_s=0.0, tokens_in=0)
        items.append(item)
    return items, ctx


def test_a_share_of_the_candidates_is_analysed_and_the_same_ones_on_every_resume():
    ids = [f"{i:08x}0000" for i in range(0, 0xFFFFFFFF, 0x01000000)]  # 256 spread ids
    picked = [i for i in ids if chosen(i, 0.25)]
    assert len(picked) == 64 and picked == [i for i in ids if chosen(i, 0.25)]  # a quarter, stably
    item, ctx = _setup(OfflineBackend(), RunConfig.model_validate({"analyze": {"share": 0.25}}))
    item.node = item.node.copy(id="ffffffff0000")
    assert Analyze().skips(item, ctx)  # not chosen: passed over, no call
    item.node = item.node.copy(id="00000000aaaa")
    assert not Analyze().skips(item, ctx)


def test_a_batch_of_candidates_is_analysed_in_one_call_with_a_report_each():
    llm = Counting()
    cfg = RunConfig.model_validate({"analyze": {"batch": 3, "batch_wait_s": 30}})
    items, ctx = _items(3, cfg, llm)
    stage = Analyze()

    async def run_all():
        async def one(item):
            with recording("analyze") as log:
                return await stage.run(item, ctx), log.calls
        return await asyncio.gather(*(one(item) for item in items))

    results = asyncio.run(run_all())
    assert llm.calls == [3]  # one call for the three, well before the 30 s wait: the batch was full
    for item, (result, _) in zip(items, results, strict=True):
        node = result.node
        report = AnalysisData.peek(node).report
        assert report.startswith(f"# Offline analysis of node {item.node.id}")
        assert "## What happened" in report and node.artifacts[ANALYSIS_BY].startswith("the offline")
    traced = [calls for _, calls in results if calls]
    assert len(traced) == 1 and len(traced[0]) == 1  # the one call traced once, on one candidate
    total = sum(r.node.llm_s for r, _ in results)
    assert total == pytest.approx(traced[0][0].seconds)  # its seconds shared out, not counted thrice


def test_a_batch_that_does_not_fill_is_sent_after_its_wait():
    llm = Counting()
    cfg = RunConfig.model_validate({"analyze": {"batch": 4, "batch_wait_s": 0.2}})
    items, ctx = _items(2, cfg, llm)
    stage = Analyze()

    async def run_all():
        return await asyncio.gather(*(stage.run(item, ctx) for item in items))

    results = asyncio.run(asyncio.wait_for(run_all(), 10))
    assert llm.calls == [2] and all("## What happened" in AnalysisData.peek(r.node).report for r in results)


def test_a_bug_in_a_batch_fails_its_candidates_instead_of_leaving_them_waiting(monkeypatch):
    from evoforge.stages import analyze as module

    def broken(item, ctx):
        raise ZeroDivisionError("a bug building the prompt")

    monkeypatch.setattr(module, "analysis_messages", broken)
    cfg = RunConfig.model_validate({"analyze": {"batch": 2, "batch_wait_s": 30}})
    items, ctx = _items(2, cfg, OfflineBackend())
    stage = Analyze()

    async def run_all():
        return await asyncio.gather(*(stage.run(item, ctx) for item in items), return_exceptions=True)

    outcomes = asyncio.run(asyncio.wait_for(run_all(), 10))  # none waits for ever
    assert [type(o) for o in outcomes] == [ZeroDivisionError, ZeroDivisionError]  # each raises it: the
    # engine records an internal error on each node, with the traceback in run.log


@pytest.mark.slow
def test_analysis_goes_to_its_own_endpoint_and_research_to_the_runs(tmp_path):
    with SimulatorProcess(SimConfig(median_s=0.05, slots=8, seed=1)) as research_llm, \
            SimulatorProcess(SimConfig(median_s=0.05, slots=8, seed=2)) as analysis_llm:
        config = tmp_path / "c.yaml"
        config.write_text(f"analyze:\n  llm:\n    base_url: {analysis_llm.base_url}\n"
                          "cognition:\n  enabled: false\n")
        run_dir = tmp_path / "run"
        assert main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--config", str(config), "--llm-base-url", research_llm.base_url, "--max-evals", "8",
                     "--no-mlflow", "--quiet"]) == 0
        asked = {"research": research_llm.stats()["completed"], "analysis": analysis_llm.stats()["completed"]}
    analysed = [n for n in read_nodes(run_dir) if "## What happened" in AnalysisData.peek(n).report]
    designs = [n for n in read_nodes(run_dir) if n.origin != "seed"]
    assert analysed and asked["analysis"] == len(analysed)  # every analysis call went to its endpoint
    assert asked["research"] == len(designs)  # and only the research calls to the run's
    assert read_status(run_dir)["evaluations"] == 8
