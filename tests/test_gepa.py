"""gepa on the engine: Pareto parents, a minibatch rollout whose feedback the proposer sees, a gate
that passes only children that beat their parent on that minibatch, validation of the survivors;
rejected proposals remembered on their parent; every task-model call counted once."""

from __future__ import annotations

import json
from pathlib import Path

from evoforge.infra.nodes import Node
from evoforge.stages.gate import GateData
from evoforge.stages.population.rejections import Rejections
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
    validated = [n for n in children if n.was_evaluated and not n.repeat_of]
    assert validated and gated, (len(validated), len(gated))
    for node in validated:  # a survivor beat its parent on the parent's minibatch
        assert GateData.peek(node).score > RolloutData.peek(node).parent_score
        assert all(case.startswith("train-") for case in RolloutData.peek(node).cases)
    for node in gated:
        assert node.error.startswith("gate: scored ") and not node.was_evaluated
    prompt = (run_dir / "nodes" / validated[0].id / "prompt.md").read_text()
    assert "[train-" in prompt and "[val-" not in prompt  # the minibatch's feedback, not validation's
    calls = sum(RolloutData.peek(n).task_model_calls + GateData.peek(n).task_model_calls for n in nodes)
    calls += sum(n.metrics.get("task_model_calls", 0) for n in nodes if n.was_evaluated and not n.repeat_of)
    assert status["task_model"]["calls"] == calls  # each call counted once, wherever it was made
    tried = [p for n in children if (p := run_dir / "nodes" / n.id / "prompt.md").is_file()
             and TRIED_HEADER in p.read_text()]
    assert tried, "a proposal rejected on a parent is shown in a later prompt for that parent"
