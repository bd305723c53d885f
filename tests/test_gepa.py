"""gepa on the engine: Pareto parents, a minibatch rollout whose feedback the proposer sees, a gate
that passes only children that beat their parent on that minibatch, validation of the survivors;
rejected proposals remembered on their parent; every task-model call counted once."""

from __future__ import annotations

import json
from pathlib import Path

from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.gate import GateData
from evoforge.stages.population.rejections import Rejections
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.rollout import TRIED_HEADER, RolloutData
from evoforge.stages.sinks.base import Event, EventKind
from evoforge.stages.sinks.rejections_sink import RejectionMemory


def test_the_gates_rejections_are_remembered_per_parent_from_events_and_on_resume() -> None:
    memory = Rejections()
    sink = RejectionMemory(memory, "gate")
    rejected = Node(id="c1", run_id="r", code="x", parent_id="p", status="rejected", failed_stage="gate",
                    motivation="Add a rule about full stops.")
    novelty = Node(id="c2", run_id="r", code="y", parent_id="p", status="rejected", failed_stage="engineer",
                   motivation="Too like another.")
    sink.record([Event(EventKind.FINISHED, node=rejected), Event(EventKind.PROPOSED, node=rejected),
                 Event(EventKind.FINISHED, node=novelty)])
    assert memory.tried("p") == ["Add a rule about full stops."]
    again = Rejections()
    RejectionMemory(again, "gate").rebuild([rejected, novelty])
    assert again.tried("p") == memory.tried("p")


def test_gepa_evolves_a_prompt_through_rollouts_gates_and_validation(tmp_path: Path) -> None:
    from evoforge.flows.cli import main
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from tests.helpers import read_nodes, read_status

    run_dir = tmp_path / "run"
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        code = main(["run", "house_style", "--algorithm", "gepa", "--run-dir", str(run_dir), "--workspace",
                     str(tmp_path / "ws"), "--llm-base-url", sim.base_url, "--max-evals", "30", "--workers",
                     "research=4,engineer=2", "--seed", "2", "--quiet", "--no-mlflow"])
    assert code == 0
    nodes, status = read_nodes(run_dir), read_status(run_dir)
    assert json.loads((run_dir / "config.json").read_text())["search"]["sampler"] == "pareto"
    seed = next(n for n in nodes if n.origin == "seed")
    assert status["best_score"] > seed.score_full
    children = [n for n in nodes if n.origin != "seed" and RolloutData.peek(n).cases]
    gated = [n for n in children if n.status == "rejected" and n.failed_stage == "gate"]
    validated = [n for n in children if n.was_evaluated and RepeatData.peek(n).repeat_of is None]
    assert validated and gated, (len(validated), len(gated))
    for node in validated:  # a survivor beat its parent on the parent's minibatch
        assert GateData.peek(node).score > RolloutData.peek(node).parent_score
        assert all(case.startswith("train-") for case in RolloutData.peek(node).cases)
    for node in gated:
        assert node.error.startswith("gate: scored ") and not node.was_evaluated
    prompt = (run_dir / "nodes" / validated[0].id / "prompt.md").read_text()
    assert "[train-" in prompt and "[val-" not in prompt  # the minibatch's feedback, not validation's
    calls = sum(RolloutData.peek(n).task_model_calls + GateData.peek(n).task_model_calls for n in nodes)
    calls += sum(n.metrics.get("task_model_calls", 0) for n in nodes
                 if n.was_evaluated and RepeatData.peek(n).repeat_of is None)
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:  # the winners' test cases
        calls += sum(f.metrics["task_model_calls"] for f in store.final_scores())
    assert status["task_model"]["calls"] == calls  # each call counted once, wherever it was made
    tried = [p for n in children if (p := run_dir / "nodes" / n.id / "prompt.md").is_file()
             and TRIED_HEADER in p.read_text()]
    assert tried, "a proposal rejected on a parent is shown in a later prompt for that parent"


def test_gepa_merges_two_front_members_and_gates_the_merge_against_the_better(tmp_path: Path) -> None:
    from evoforge.evaluators.task import load_task
    from evoforge.flows.cli import main
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from evoforge.stages.merge import MergeData
    from tests.helpers import read_nodes, read_status

    run_dir, config = tmp_path / "run", tmp_path / "c.json"
    config.write_text(json.dumps({"gepa": {"merge_every": 3}}))
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        code = main(["run", "house_style", "--algorithm", "gepa", "--config", str(config), "--run-dir",
                     str(run_dir), "--workspace", str(tmp_path / "ws"), "--llm-base-url", sim.base_url,
                     "--max-evals", "24", "--seed", "1", "--quiet", "--no-mlflow"])
    assert code == 0
    nodes, status = read_nodes(run_dir), read_status(run_dir)
    by_id = {n.id: n for n in nodes}
    kind = load_task("house_style").artifact
    merges = [n for n in nodes if MergeData.peek(n).ours]
    assert len(merges) >= 3
    # every 3rd item drawn reaches the merge stage (the others go straight to the rollout); an item
    # that finds no partner goes on to the rollout as well
    drawn = status["rollout_finished"] + len(merges)
    assert abs(status["merge_finished"] - drawn / 3) <= 2, (status["merge_finished"], drawn)
    pairs = [tuple(sorted((MergeData.peek(n).ours, MergeData.peek(n).theirs))) for n in merges]
    assert len(set(pairs)) == len(pairs)  # a pair is merged once
    for node in merges:
        data = MergeData.peek(node)
        ours, theirs, ancestor = by_id[data.ours], by_id[data.theirs], by_id[data.ancestor]
        assert node.code == kind.merge(ancestor.code, ours.code, theirs.code) not in (ours.code, theirs.code)
        assert ours.score_full >= theirs.score_full and node.parent_id in (ours.id, theirs.id)
        assert node.motivation.startswith("GEPA merge of") and GateData.peek(node).score is not None
        if node.was_evaluated:  # through the gate: it beat the better of the two on the minibatch
            assert GateData.peek(node).score > RolloutData.peek(node).parent_score
    # a merge that passed the gate was validated; the ones that helped beat both parents on val
    def parents_best(node: Node) -> float:
        return max(by_id[MergeData.peek(node).ours].score_full, by_id[MergeData.peek(node).theirs].score_full)

    assert any(n.was_evaluated and n.score_full > parents_best(n) for n in merges)
    calls = sum(RolloutData.peek(n).task_model_calls + GateData.peek(n).task_model_calls for n in nodes)
    calls += sum(n.metrics.get("task_model_calls", 0) for n in nodes
                 if n.was_evaluated and RepeatData.peek(n).repeat_of is None)
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        calls += sum(f.metrics["task_model_calls"] for f in store.final_scores())
    assert status["task_model"]["calls"] == calls  # the merge's parent minibatch calls counted on it
