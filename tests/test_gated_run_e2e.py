"""A gated run end to end over the LLM simulator (HTTP): knobs tuned by Optuna on the pilot
level, a research plan over branches, promotions to full, the final report, and all of it in
the run folder, MLflow and Prefect."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from evoforge.flows.cli import main
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.timeline import stage_gauges
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.rounds.plan_data import node_branch
from evoforge.stages.tuning.param_study import TuningData
from tests.gated_tasks import FINAL_LOW, write_staged_task
from tests.helpers import prefect_run_of, read_nodes, read_status

pytestmark = pytest.mark.slow

TRIALS = 4


@pytest.fixture(scope="module")
def gated_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gated")
    task = write_staged_task(root)
    run_dir, workspace = root / "run", root / "ws"
    config = root / "c.yaml"
    config.write_text(json.dumps({"param_search": {"trials": TRIALS, "startup": 2},
                                  "plan": {"slots": 2, "every": 2, "stall_rounds": 2, "min_candidates": 2},
                                  "promotion": {"every": 2, "top_k": 2, "final_top": 2},
                                  "cognition": {"enabled": False}}))
    with SimulatorProcess(SimConfig(median_s=0.03, sigma=0.3, slots=8, seed=4)) as sim:
        code = main(["run", str(task), "--run-dir", str(run_dir), "--workspace", str(workspace),
                     "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", "14",
                     "--workers", "research=3,engineer=2", "--seed", "2", "--quiet"])
    assert code == 0
    return run_dir, workspace


def test_every_structure_is_tuned_on_the_pilot_stage_and_its_trials_are_kept(gated_run):
    run_dir, _ = gated_run
    tuned = [n for n in read_nodes(run_dir) if n.status == EVALUATED]
    assert tuned and all(TuningData.peek(n).trials_run == TRIALS for n in tuned)
    node = tuned[0]
    trials = json.loads((run_dir / "param_trials" / f"{node.id}.json").read_text())
    assert len(trials["trials"]) == TRIALS + 1  # the declared defaults, then the new trials
    assert trials["trials"][0]["source"] == "default"
    best = max(t["value"] for t in trials["trials"] if t["value"] is not None)
    assert node.score_pilot == pytest.approx(best)
    assert EngineerData.peek(node).score_default == pytest.approx(trials["trials"][0]["value"])
    assert set(node.params) == {"x", "width"}
    assert set(TuningData.peek(node).saturation) >= {"improved", "spread"}


def test_the_plan_owns_the_branches_and_is_versioned(gated_run):
    run_dir, _ = gated_run
    designs = [n for n in read_nodes(run_dir) if n.origin != "seed"]
    assert designs and all(node_branch(n) for n in designs)
    plan = (run_dir / "research_plan.md").read_text()
    assert "simulated" in plan.lower() or "offline" in plan.lower()  # never presented as an LLM's
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        plans = store.get_meta("plans")
    assert len(plans) >= 2 and [p["version"] for p in plans] == list(range(1, len(plans) + 1))
    ever = {b["id"] for p in plans for b in p["slots"]}
    assert {node_branch(n) for n in designs} <= ever


def test_promotion_scores_the_leaders_at_full_and_the_final_report_holds_the_held_out_scores(gated_run):
    run_dir, _ = gated_run
    nodes = read_nodes(run_dir)
    promoted = [n for n in nodes if PromotionData.peek(n).round is not None]
    assert len(promoted) >= 2 and all(n.score_full is not None for n in promoted)
    status = read_status(run_dir)
    assert status["best_level"] == "full" and status["promotions"] == len(promoted)
    winner = max(promoted, key=lambda n: n.score_full)
    assert status["best_node"] == winner.id
    assert (run_dir / "best" / "program.py").read_text() == winner.code
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        finals = store.final_scores()
    assert [f.node_id for f in finals][0] == winner.id and len(finals) == 2
    assert all(FINAL_LOW <= f.score <= FINAL_LOW + 1 for f in finals)
    report = (run_dir / "report.md").read_text()
    assert "## Final (held-out) scores" in report and f"`{winner.id}`" in report
    assert main(["report", str(run_dir)]) == 0  # written again later: the same report, gated sections too
    assert (run_dir / "report.md").read_text() == report
    board = (run_dir / "leaderboard.md").read_text()
    assert "| rank | node | branch | pilot | full |" in board and "## Promotions" in board
    unquoted = re.sub(r"`[^`]*`", "", board)  # node ids are quoted: all-digit ones are no scores
    numbers = [float(x) for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", unquoted)
               if not re.fullmatch(r"\d{12}", x)]  # an all-digit node id named in a motivation
    assert numbers and max(numbers) < FINAL_LOW  # final scores never reach the leaderboard


def test_every_promotion_went_through_the_engines_promote_stage_pool(gated_run, capsys):
    run_dir, _ = gated_run
    promoted = [n for n in read_nodes(run_dir) if PromotionData.peek(n).round is not None]
    status = read_status(run_dir)
    assert promoted and stage_gauges(status)["promote"]["finished"] == len(promoted)
    assert status["promotions"] == len(promoted)  # counted as promotions ...
    evaluated = [n for n in read_nodes(run_dir) if n.was_evaluated]
    assert status["evaluations"] == len(evaluated)  # ... not as new evaluations
    capsys.readouterr()
    assert main(["stages", "--algorithm", "ml-evolve", "--workers", "promote=3", "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out) if r["stage"] == "promote")
    assert (row["line"], row["enabled"], row["workers"], row["then"]) == ("side", True, 3, "commit")


def test_trials_and_promotions_are_in_mlflow(gated_run):
    from mlflow.tracking import MlflowClient

    run_dir, workspace = gated_run
    client = MlflowClient(tracking_uri=f"sqlite:///{workspace / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=2000)
    by_id = {r.info.run_id: r for r in runs}
    trials = [r for r in runs if r.info.run_name.startswith("trial-")]
    evaluated = [n for n in read_nodes(run_dir) if n.status == EVALUATED]
    assert len(trials) == len(evaluated) * (TRIALS + 1)
    parent = by_id[trials[0].data.tags["mlflow.parentRunId"]]
    assert parent.info.run_name == "node-" + trials[0].info.run_name.split("-")[1]
    assert any(k.startswith("knob.") for k in trials[0].data.params)
    promotions = [r for r in runs if r.info.run_name.startswith("promotion-")]
    assert promotions and all(r.data.metrics["promoted"] >= 1 for r in promotions)
    top = next(r for r in runs if r.info.run_name.startswith("toy_staged-"))
    files = {f.path for f in client.list_artifacts(top.info.run_id)}
    assert {"leaderboard.md", "research_plan.md", "report.md"} <= files
    # the plan agent's calls (one per re-plan: version 1 is the initial plan) are traces on the run
    import mlflow
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        replans = len(store.get_meta("plans")) - 1
    with _use_tracking_uri(f"sqlite:///{workspace / 'mlflow.db'}"):
        traces = mlflow.search_traces(locations=[top.info.experiment_id], run_id=top.info.run_id,
                                      return_type="list", max_results=1000)
    plan_traces = [t for t in traces if t.info.tags.get("purpose") == "plan"]
    assert replans >= 1 and len(plan_traces) == replans
    assert {t.info.tags["plan_version"] for t in plan_traces} == {str(v) for v in range(2, replans + 2)}
    assert all(t.info.tags["author"] == "simulated" for t in plan_traces)  # never shown as an LLM's


def test_trials_promotions_and_the_final_report_are_prefect_runs(gated_run):
    run_dir, _ = gated_run
    _, names = prefect_run_of(run_dir)
    evaluated = [n for n in read_nodes(run_dir) if n.status == EVALUATED]
    assert sum(name.startswith("trial-") for name in names) == len(evaluated) * TRIALS
    assert f"trial-{evaluated[0].id}-1" in names

    from prefect.client.orchestration import get_client

    async def subflows() -> list[str]:
        async with get_client() as client:
            return [f.name for f in await client.read_flow_runs(limit=200)]

    flows = asyncio.run(subflows())
    assert any(name.startswith("final-report-") for name in flows)
    # the promotion subflows hold one task run `promote-<node>` for exactly the nodes the node
    # database says were promoted, each in the subflow of the round that promoted it
    promoted = {n.id: PromotionData.peek(n).round for n in read_nodes(run_dir)
                if PromotionData.peek(n).round is not None}
    runs = _promote_task_runs(read_status(run_dir)["run_id"])
    assert promoted and sorted(name for name, _, _ in runs) == sorted(f"promote-{i}" for i in promoted)
    assert {name: round_no for name, round_no, _ in runs} == {f"promote-{i}": r for i, r in promoted.items()}
    assert all(state == "COMPLETED" for _, _, state in runs), runs
    assert not [name for name in names if name.startswith("promote-")]  # none in the main flow run


def _promote_task_runs(run_id: str) -> list[tuple[str, int, str]]:
    """(name, round, state) of every task run in this run's promotion subflows."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read() -> list[tuple[str, int, str]]:
        async with get_client() as client:
            subflows = [f for f in await client.read_flow_runs(limit=200)
                        if f.name.startswith("promotion-") and f.parameters.get("run_id") == run_id]
            assert subflows, "no promotion subflow of this run"
            rounds = {f.id: f.parameters["round_no"] for f in subflows}
            task_runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=list(rounds))), limit=200)
            return [(t.name, rounds[t.flow_run_id], t.state.type.value) for t in task_runs]

    return asyncio.run(read())
