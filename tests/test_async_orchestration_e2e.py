"""Staleness policies, speculation and adaptive workers in real runs; every decision is on the
node, and status.json's accounting agrees with the node database."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from evoforge.flows.cli import main
from evoforge.infra.artifacts.program import Program
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED, FAILED, PRUNED, REJECTED, ROLLED_BACK, STALE
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.timeline import read_timeline
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.reflect_data import ReflectData, ReflectOutcome
from tests.helpers import prefect_run_of, read_nodes, read_status

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, task: str, config: dict, evals: int, *extra: str) -> Path:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps(config))
    run_dir = tmp_path / "run"
    code = main(["run", task, "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--config", str(cfg), "--max-evals", str(evals), "--no-mlflow", "--quiet",
                 "--seed", "2", *extra])
    assert code == 0
    return run_dir


def test_guarded_drops_stale_items_and_says_why(tmp_path):
    run_dir = _run(tmp_path, "circle_packing",
                   {"staleness": {"policy": "guarded", "max_staleness": 0},
                    "engine": {"workers": {"research": 4, "engineer": 2}}}, 40)
    nodes = read_nodes(run_dir)
    stale = [n for n in nodes if n.status == STALE]
    assert stale, "with max_staleness 0 some items must arrive after a new best"
    assert all(StalenessData.peek(n).staleness > 0 and "guarded: dropped" in StalenessData.peek(n).note
               for n in stale)
    passed = [n for n in nodes if n.status == EVALUATED and n.origin != "seed"]
    assert all("guarded: passed" in StalenessData.peek(n).note for n in passed)
    assert sum(n.was_evaluated for n in nodes) == 40
    assert read_status(run_dir)["dropped_stale"] == len(stale)


def _reached_engineer(node) -> bool:
    """Evaluated, failed, or rejected by the engineer as a repeat or near-duplicate (a patch
    onto the best can rebuild a program the run already has): each means it was not dropped."""
    if node.status == REJECTED:
        return node.failed_stage == "engineer" and (
            RepeatData.peek(node).repeat_of is not None
            or (node.error or "").startswith("rejected before evaluation"))
    return node.status in (EVALUATED, FAILED)


def test_reflective_reflects_over_http_and_records_each_decision(tmp_path):
    with SimulatorProcess(SimConfig(median_s=0.15, sigma=0.3, slots=8, seed=4)) as sim:
        run_dir = _run(tmp_path, "circle_packing",
                       {"staleness": {"policy": "reflective", "similarity_threshold": 0.0},
                        # the Analyzer delays each result's commit by one LLM call, and with it the
                        # pool updates that make items stale: off here, where staleness is the point
                        "analyze": {"enabled": False},
                        # a fast LLM makes research (8 workers) far faster than the evaluations and
                        # reflections it feeds, so adaptive control moves workers in every run; a
                        # timeline line every 0.2 s (finer than tau) shows a pool before and after
                        "adaptive": {"enabled": True, "tau_s": 0.5},
                        "engine": {"progress_interval_s": 0.2}}, 40,
                       "--llm-base-url", sim.base_url)
    nodes = read_nodes(run_dir)
    by_id = {n.id: n for n in nodes}
    status = read_status(run_dir)
    outcomes = {n.id: ReflectData.peek(n).outcome for n in nodes}
    reflected = [n for n in nodes if outcomes[n.id] is not None and outcomes[n.id].decided]
    assert reflected and status["reflected"] == len(reflected)
    assert status["patched"] == sum(o == ReflectOutcome.PATCHED for o in outcomes.values())
    for node in reflected:  # the decision recorded on each node is what happened to it
        verdict = StalenessData.peek(node).note.rsplit("reflection: ", 1)[1]
        assert verdict.split(" ")[0] == {ReflectOutcome.DROPPED: "dropped", ReflectOutcome.PATCHED: "patched",
                                         ReflectOutcome.UNUSABLE_PATCH: "patch", ReflectOutcome.KEPT: "kept",
                                         ReflectOutcome.UNDECIDED: "no"}[outcomes[node.id]], verdict
        if verdict == "dropped":
            assert node.status == STALE and not node.was_evaluated, (node.id, node.status)
        elif verdict.startswith("patched onto "):  # its idea re-applied to the best: a new parent
            onto = verdict.removeprefix("patched onto ")
            assert _reached_engineer(node) and node.parent_id == onto, (node.id, node.status)
            assert node.diff == Program().diff(by_id[onto].code, node.code), node.id
            assert ReflectData.peek(node).patched_from not in (None, onto), (node.id, node.owned)
        else:  # kept: evaluated as it was designed, on the parent it was designed on
            assert verdict.endswith("kept"), StalenessData.peek(node).note
            assert _reached_engineer(node), (node.id, node.status)
            assert ReflectData.peek(node).patched_from is None, node.id
            assert node.diff == Program().diff(by_id[node.parent_id].code, node.code), node.id
    patched = [n for n in reflected if "patched onto" in StalenessData.peek(n).note]
    assert status["patched"] == len(patched)
    assert status["wasted_llm_s"] == pytest.approx(
        sum(n.llm_s for n in nodes if n.status in (STALE, ROLLED_BACK)), abs=0.01)
    # adaptive control acted: each decision is logged and counted, and the timeline shows the
    # first one's pool go from its count before to its count after (lines with no worker are from
    # before the engine started or after it stopped)
    decisions = re.findall(r"adaptive: [+-]1 (\w+) \((\d+)->(\d+)\)", (run_dir / "run.log").read_text())
    assert decisions and status["adaptive_decisions"] == len(decisions)
    stage, before, after = decisions[0][0], int(decisions[0][1]), int(decisions[0][2])
    workers = [w for row in read_timeline(run_dir / "timeline.jsonl")
               if (w := row["stages"].get(stage, {}).get("workers", 0)) >= 1]
    assert workers[0] == before and next((w for w in workers if w != before), None) == after, (
        decisions[0], workers)


def test_speculation_prunes_releases_and_settles(tmp_path):
    run_dir = _run(tmp_path, "bin_packing", {"speculation": {"alpha_spec": 0.25}}, 24)
    nodes = read_nodes(run_dir)
    status = read_status(run_dir)
    pruned = [n for n in nodes if n.status == PRUNED]
    assert pruned, "most candidates cannot beat the best on the prefix"
    prefix = math.ceil(0.25 * 40)
    assert all(n.cases_done == prefix and n.score_partial is not None and not n.score_full
               for n in pruned)
    released = [n for n in nodes if n.speculative_at is not None]
    assert all(n.status in (EVALUATED, ROLLED_BACK) for n in released)
    assert all(n.cases_done == 40 for n in released if n.status == EVALUATED)
    # a rolled-back one ran to the end, or was stopped at a later checkpoint (20 or 30 cases)
    assert all(n.cases_done in (2 * prefix, 3 * prefix, 40) for n in released if n.status == ROLLED_BACK)
    assert status["pruned"] == len(pruned) and status["speculative_released"] == len(released)
    assert status["confirmed"] + status["rolled_back"] == len(released)
    full = [n for n in nodes if n.status == EVALUATED]
    assert all(len(n.case_scores) == 40 for n in full)
    _, names = prefect_run_of(run_dir)  # one Prefect task run per evaluation, and nothing else
    assert released and {f"evaluate-{n.id}" for n in released} <= set(names)
    assert all(name.startswith(("evaluate-", "trial-")) for name in names), sorted(names)[:5]
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        saved = store.get_meta("case_order")
    assert sorted(saved["order"]) == sorted(full[0].case_scores)


def test_a_resumed_case_based_run_keeps_its_validation_order(tmp_path):
    from evoforge.evaluators.task import load_task
    from evoforge.flows.session import open_session
    from evoforge.infra.config import RunConfig
    from evoforge.infra.offline.backend import OfflineBackend
    from evoforge.stages.algorithms import asi_evolve

    config = {"speculation": {"alpha_spec": 0.25, "reorder_window": 1}}
    run_dir = _run(tmp_path, "bin_packing", config, 10)
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        saved = store.get_meta("case_order")
    assert any(s >= 1 for s in saved["streaks"].values())
    cfg = RunConfig.model_validate({**config, "tracking": {"mlflow": False}})
    session = open_session(load_task("bin_packing"), cfg, run_dir, OfflineBackend(), tmp_path / "ws",
                           asi_evolve.pipeline(), cases=sorted(saved["order"]))
    try:
        assert session.ctx.case_order.state() == saved
        assert session.state.case_order is session.ctx.case_order
    finally:
        session.hub.close()
    assert _run(tmp_path, "bin_packing", config, 14) == run_dir
    assert sum(n.was_evaluated for n in read_nodes(run_dir)) == 14
