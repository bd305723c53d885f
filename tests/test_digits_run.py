"""The built-in ML task over the LLM simulator: a short staged run leaves all four artifacts."""

from __future__ import annotations

import json

import pytest

from evoforge.flows.cli import main
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED
from evoforge.stages.rounds.plan_data import node_branch
from tests.helpers import read_nodes, read_status

pytestmark = pytest.mark.slow


def test_a_short_digits_run_over_the_simulator_leaves_plan_trials_leaderboard_and_report(tmp_path):
    run_dir = tmp_path / "run"
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"param_search": {"trials": 2, "startup": 1},
                                  "plan": {"slots": 2, "every": 1},
                                  "promotion": {"every": 1, "top_k": 2, "final_top": 1},
                                  "cognition": {"enabled": False}}))
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.3, slots=4, seed=3)) as sim:
        code = main(["run", "digits", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", "5",
                     "--workers", "research=2,engineer=2", "--seed", "1", "--quiet"])
    assert code == 0
    nodes = read_nodes(run_dir)
    tuned = [n for n in nodes if n.status == EVALUATED]
    assert tuned and all((run_dir / "param_trials" / f"{n.id}.json").is_file() for n in tuned)
    designs = [n for n in nodes if n.origin != "seed"]
    assert designs and all(n.backend == "openai" and node_branch(n) for n in designs)
    assert any("make_pipeline(" in n.code and n.code != nodes[0].code for n in designs)
    status = read_status(run_dir)
    assert status["best_level"] == "full" and 0.85 < status["best_score"] <= 1.0
    plan = (run_dir / "research_plan.md").read_text()
    assert plan.startswith("Author: ") and "| 1 | 0 | offline (no LLM): initial plan" in plan
    # the first plan's branches are the task's hypothesis priors; a later version may refresh them
    # (timing decides), but the first designs were asked under them
    prompts = [(run_dir / "nodes" / n.id / "prompt.md") for n in designs]
    assert any("An RBF SVM is the strongest single model" in p.read_text() for p in prompts if p.is_file())
    report = (run_dir / "report.md").read_text()
    assert "## Final (held-out) scores" in report and "## Optuna vs the declared defaults" in report
    assert "| rank | node | branch | pilot | full |" in (run_dir / "leaderboard.md").read_text()
