"""Learn → design → experiment → analyze in a real run over the LLM simulator (HTTP), with the
real sentence-embedding model: retrieved items in prompts, analyses on nodes and in MLflow,
lessons written back and retrieved by later candidates, task runs in Prefect, the report."""

from __future__ import annotations

import json

import pytest

from evoforge.cognition.embeddings import make_embedder
from evoforge.cognition.store import CognitionBase
from evoforge.flows.cli import main
from evoforge.infra.config import CognitionConfig
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.learn import LearnData
from tests.helpers import prefect_run_of, read_nodes, read_status

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("learn-analyze")
    run_dir, workspace = root / "run", root / "ws"
    config = root / "c.yaml"  # 15 seeded priors compete with the lessons: show 8 items, not 5
    # every stage run a Prefect task run too (engine.task_runs: stages), so the UI shows the pipeline
    # every candidate analysed by the simulator, bound or not (analyze.by_value off): research=4 is 4
    # LLM slots, which research and analysis share (stages/analysis_value.py is tested on its own);
    # no counterfactual runs (verify_share 0): a lesson whose claim they refute is held back from
    # retrieval by design (tests/test_verify.py, tests/test_cognition_shared.py), and this run's
    # lessons must reach later candidates whatever the simulator's claims were
    config.write_text("cognition:\n  top_k: 8\n  min_similarity: 0.15\nengine:\n  task_runs: stages\n"
                      "analyze:\n  by_value: false\n  verify_share: 0\n")
    with SimulatorProcess(SimConfig(median_s=0.15, sigma=0.3, slots=8, seed=5)) as sim:
        code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(workspace),
                     "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", "60",
                     "--workers", "research=4,engineer=2", "--seed", "3", "--quiet"])
    assert code == 0
    return run_dir, workspace


def test_prompts_carry_retrieved_prior_knowledge(finished_run):
    run_dir, _ = finished_run
    designs = [n for n in read_nodes(run_dir) if n.origin != "seed"]
    shown = [n for n in designs if LearnData.peek(n).cognition_ids]
    assert len(shown) >= len(designs) // 2
    prompt = (run_dir / "nodes" / shown[0].id / "prompt.md").read_text()
    assert "## Prior knowledge (retrieved from the cognition base)" in prompt and "### K1: " in prompt


def test_every_evaluated_candidate_has_an_analysis_on_the_node_on_disk_and_in_mlflow(finished_run):
    from mlflow.tracking import MlflowClient

    run_dir, workspace = finished_run
    evaluated = [n for n in read_nodes(run_dir) if n.was_evaluated and n.origin != "seed"]
    assert evaluated and all("## What happened" in AnalysisData.peek(n).report for n in evaluated)
    assert all("Simulated" in AnalysisData.peek(n).report.splitlines()[0]  # labelled, never "LLM"
               for n in evaluated)
    shown = (run_dir / "nodes" / evaluated[0].id / "analysis.md").read_text()
    assert shown == AnalysisData.peek(evaluated[0]).report
    client = MlflowClient(tracking_uri=f"sqlite:///{workspace / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_string=f"attributes.run_name = 'node-{evaluated[0].id}'")
    assert runs
    files = [f.path for f in client.list_artifacts(runs[0].info.run_id)]
    assert "analysis.md" in files


def test_simulated_lessons_stay_in_the_run_and_are_retrieved_by_later_candidates(finished_run):
    run_dir, workspace = finished_run
    status = read_status(run_dir)
    written = status["sinks"]["cognition"]
    assert written["lessons_to_run"] >= 1 and written["lessons_to_workspace"] == 0
    run_id = status["run_id"]
    shared = CognitionBase(workspace / "cognition", make_embedder(CognitionConfig()))
    assert not [i for i in shared.list() if i.provenance.endswith(f"in run {run_id}")]  # never shared
    own = CognitionBase(run_dir / "cognition", make_embedder(CognitionConfig()))
    lessons = {i.id: i for i in own.list()}
    assert len(lessons) == written["lessons_to_run"]
    assert all(i.provenance.startswith("LLM simulator lesson (simulated, not an LLM's) of node ")
               and "simulated" in i.tags for i in lessons.values())
    nodes = read_nodes(run_dir)
    writers = [n for n in nodes
               if AnalysisData.peek(n).lessons and n.artifacts.get("lessons_by") == "simulated"]
    later = [n for n in nodes if set(LearnData.peek(n).cognition_ids) & set(lessons)]
    assert later, "a lesson kept in the run is shown to a later candidate of the run"
    first_writer = min(writers, key=lambda n: n.evaluated_at or 0)
    assert any(n.created_at > (first_writer.evaluated_at or 0) for n in later)


def test_learn_and_analyze_are_prefect_task_runs(finished_run):
    run_dir, _ = finished_run
    _, names = prefect_run_of(run_dir)
    for prefix in ("learn-", "research-", "evaluate-", "analyze-"):
        assert any(n.startswith(prefix) for n in names), prefix


def test_the_report_gives_the_origin_breakdown(finished_run):
    run_dir, _ = finished_run
    report = (run_dir / "report.md").read_text()
    assert "| origin | all designs | top 10% |" in report and "| cognition |" in report
    nodes = [n for n in read_nodes(run_dir) if n.origin != "seed" and n.code]
    assert {n.origin for n in nodes} <= {"cognition", "experience", "novel"}
    assert any(n.origin == "cognition" for n in nodes)  # the simulator cites the priors it is shown
    assert main(["report", str(run_dir)]) == 0
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    assert any(n.status == EVALUATED for n in nodes)
