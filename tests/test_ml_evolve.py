"""`ml-evolve`: ml-evolve's roles alone (plan agent, mutation agent, Optuna, pilot -> full ->
final) on a staged task over the LLM simulator; a task with no pilot level is refused in one
line."""

from __future__ import annotations

import json

import pytest

from evoforge.flows.cli import main
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.algorithms import algorithm_named
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.rounds.plan_data import node_branch
from evoforge.stages.tuning.param_study import TuningData
from tests.gated_tasks import write_staged_task
from tests.helpers import read_nodes, read_status


def test_ml_evolve_declares_the_roles_without_asi_evolves_parts():
    algorithm = algorithm_named("ml-evolve")
    assert algorithm.pipeline().names() == ["research", "engineer", "debug", "param_search", "reflect",
                                            "promote"]
    assert algorithm.evolves("files") and not algorithm.evolves("text")


def test_a_task_without_a_pilot_level_is_refused_in_one_line(tmp_path, capsys):
    code = main(["run", "circle_packing", "--algorithm", "ml-evolve", "--run-dir", str(tmp_path / "r"),
                 "--workspace", str(tmp_path / "ws"), "--max-evals", "2", "--quiet"])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if not line.startswith("[evoforge]")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "ml-evolve evolves staged tasks" in lines[0] and "circle_packing" in lines[0]
    assert not (tmp_path / "r" / "nodes.duckdb").exists()


@pytest.mark.slow
def test_ml_evolve_plans_tunes_promotes_and_reports_without_cognition_or_analyzer(tmp_path):
    task = write_staged_task(tmp_path)
    run_dir = tmp_path / "run"
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"param_search": {"trials": 3, "startup": 1},
                                  "plan": {"slots": 2, "every": 2, "min_candidates": 2},
                                  "promotion": {"every": 2, "top_k": 2, "final_top": 1}}))
    with SimulatorProcess(SimConfig(median_s=0.03, sigma=0.3, slots=8, seed=3)) as sim:
        code = main(["run", str(task), "--algorithm", "ml-evolve", "--run-dir", str(run_dir),
                     "--workspace", str(tmp_path / "ws"), "--config", str(config),
                     "--llm-base-url", sim.base_url, "--max-evals", "10", "--seed", "1", "--quiet"])
    assert code == 0
    nodes = read_nodes(run_dir)
    evaluated = [n for n in nodes if n.status == EVALUATED and n.origin != "seed"]
    assert evaluated
    # the plan agent owns the branches; Optuna tuned the structures; promotion and the final ran
    assert all(node_branch(n) for n in evaluated), [(n.id, node_branch(n)) for n in evaluated]
    assert all(TuningData.peek(n).trials_run == 3 for n in evaluated)
    assert any(PromotionData.peek(n).round is not None and n.score_full is not None for n in nodes)
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        assert len(store.final_scores()) == 1
    # ASI-Evolve's parts stayed out: nothing retrieved, nothing analysed
    assert not any(AnalysisData.peek(n).report or "learn" in n.owned for n in nodes)
    assert read_status(run_dir)["algorithm"] == "ml-evolve"
