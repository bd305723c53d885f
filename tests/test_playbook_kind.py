"""The `playbook` artifact kind: ACE's bullets with ids and counters, changed only by delta
operations merged deterministically; an operation naming a missing bullet, a rewrite or a
SEARCH/REPLACE edit is refused with the reason; a malformed playbook or task.yaml is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoforge.evaluators.task import TaskError, load_task
from evoforge.infra.artifacts.playbook import Playbook, parse_playbook
from evoforge.infra.evolve_block import EditError

KIND = Playbook(program_name="playbook.md")
PARENT = ("## CONVERSIONS\n[conv-1] helpful=2 harmful=0 :: 1 mile = 1.609 km\n"
          "[conv-3] helpful=0 harmful=1 :: 1 inch = 2.45 cm\n"
          "## STRATEGIES\n[strat-1] helpful=0 harmful=0 :: Round to 3 decimals.\n")


def answer(*ops: dict, motivation: str = "Fix the factors.") -> str:
    return f"{motivation}\n```json\n{json.dumps({'operations': list(ops)})}\n```\n"


def test_delta_operations_merge_in_order_and_number_new_bullets_after_the_highest_id() -> None:
    applied = KIND.apply(PARENT, answer(
        {"type": "ADD", "section": "CONVERSIONS", "content": "1 pound = 0.4536 kg"},
        {"type": "UPDATE", "id": "conv-3", "content": "1 inch = 2.54 cm"},
        {"type": "TAG", "id": "conv-1", "tag": "helpful"},
        {"type": "REMOVE", "id": "strat-1"},
        {"type": "ADD", "section": "CHECKS", "content": "Name the unit   in the answer."}))
    assert applied.code == ("## CONVERSIONS\n[conv-1] helpful=3 harmful=0 :: 1 mile = 1.609 km\n"
                            "[conv-3] helpful=0 harmful=1 :: 1 inch = 2.54 cm\n"
                            "[conv-4] helpful=0 harmful=0 :: 1 pound = 0.4536 kg\n"
                            "## STRATEGIES\n"
                            "## CHECKS\n[checks-1] helpful=0 harmful=0 :: Name the unit in the answer.\n")
    assert applied.motivation == "Fix the factors."
    ops = ({"type": "ADD", "section": "CONVERSIONS", "content": "1 pound = 0.4536 kg"},
           {"type": "ADD", "section": "CONVERSIONS", "content": "1 pound = 0.4536 kg"})
    twice = KIND.apply(PARENT, answer(*ops)).code
    assert twice.count("0.4536") == 1 and twice == KIND.apply(PARENT, answer(*ops)).code  # one merge


@pytest.mark.parametrize(("text", "reason"), [
    (answer({"type": "UPDATE", "id": "conv-9", "content": "x"}),
     "delta operation 1 (UPDATE) names bullet 'conv-9', which the playbook does not have"),
    (answer({"type": "TAG", "id": "conv-1", "tag": "great"}), "'tag' must be helpful or harmful"),
    (answer({"type": "MERGE", "id": "conv-1"}), "type must be one of ADD, UPDATE, REMOVE, TAG"),
    (answer({"type": "ADD", "content": "x"}), "'section' must name the section"),
    (answer({"type": "ADD", "section": "CONVERSIONS", "content": "1 mile = 1.609 km"}),
     "do not change the playbook"),
    ("Rewritten.\n```text\n## ALL\n[a-1] helpful=0 harmful=0 :: everything\n```\n", "is not JSON"),
    ("Edit.\n<<<<<<< SEARCH\n## STRATEGIES\n=======\n## TIPS\n>>>>>>> REPLACE\n",
     "not SEARCH/REPLACE blocks"),
    ("Nothing.\n```json\n{\"operations\": []}\n```\n", "at least one operation"),
])
def test_an_unusable_delta_is_refused_with_its_reason(text: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        KIND.apply(PARENT, text)


def test_a_malformed_playbook_names_its_line() -> None:
    with pytest.raises(ValueError, match="line 2 is neither a '## SECTION' line nor a bullet"):
        parse_playbook("## A\n- a loose note\n")
    with pytest.raises(ValueError, match="bullet id 'a-1' appears twice"):
        parse_playbook("## A\n[a-1] helpful=0 harmful=0 :: x\n[a-1] helpful=0 harmful=0 :: y\n")


def _task(tmp_path: Path, yaml: str, playbook: str = PARENT) -> Path:
    root = tmp_path / "pb"
    root.mkdir()
    (root / "playbook.md").write_text(playbook)
    (root / "evaluator.py").write_text("def cases():\n    return {'val': [{'id': 'v'}]}\n"
                                       "async def run(p, c, llm):\n    return ''\n"
                                       "def metric(c, o):\n    return 0.0\n")
    (root / "task.yaml").write_text(yaml)
    return root


def test_a_playbook_task_loads_with_its_kind_and_is_scored_by_a_task_model(tmp_path: Path) -> None:
    task = load_task(_task(tmp_path, "kind: playbook\nplaybook: playbook.md\n"))
    assert (task.kind, task.program_name, task.uses_task_model) == ("playbook", "playbook.md", True)
    shown = task.artifact.show(task.initial_code)
    assert shown.startswith("## Current playbook\n```playbook\n## CONVERSIONS")


@pytest.mark.parametrize(("yaml", "playbook", "message"), [
    ("kind: playbook\n", PARENT, "task.yaml: kind playbook needs 'playbook'"),
    ("kind: playbook\nplaybook: playbook.md\n", "## A\nloose\n", "playbook.md: line 2 is neither"),
    ("kind: text\nprompt: playbook.md\nplaybook: playbook.md\n", PARENT, "'playbook' is for kind playbook"),
])
def test_a_malformed_playbook_task_is_one_line(tmp_path: Path, yaml: str, playbook: str,
                                              message: str) -> None:
    with pytest.raises(TaskError, match=message):
        load_task(_task(tmp_path, yaml, playbook))


def test_a_playbook_grows_by_deltas_over_the_simulator(tmp_path: Path) -> None:
    """unit_playbook end to end: the simulated curator adds the conversion factors the feedback
    shows are missing, as delta operations; every stored playbook parses, the seed's bullets keep
    their ids, and the score rises."""
    from evoforge.flows.cli import main
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from tests.helpers import read_nodes, read_status

    run_dir = tmp_path / "run"
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        code = main(["run", "unit_playbook", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--llm-base-url", sim.base_url, "--max-evals", "10", "--workers",
                     "research=4,engineer=2", "--seed", "1", "--quiet", "--no-mlflow"])
    assert code == 0
    nodes, status = read_nodes(run_dir), read_status(run_dir)
    seed = next(n for n in nodes if n.origin == "seed")
    assert seed.score_full == 0.125 and status["best_score"] > 0.3
    seed_ids = {b.id for bullets in parse_playbook(seed.code).values() for b in bullets}
    for node in nodes:
        if node.code:
            ids = {b.id for bullets in parse_playbook(node.code).values() for b in bullets}
            assert seed_ids <= ids or node.status != "evaluated"  # grown, never rewritten
    best = next(n for n in nodes if n.id == status["best_node"])
    assert "1 pound = 0.4536 kg" in best.code or len(parse_playbook(best.code)["CONVERSIONS"]) > 1
    answer = next((run_dir / "nodes" / n.id / "answer.md").read_text() for n in nodes
                  if (run_dir / "nodes" / n.id / "answer.md").is_file())
    assert '"operations"' in answer
    assert (run_dir / "best" / "files" / "playbook.md").read_text() == best.code
