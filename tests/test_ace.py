"""`ace`: generator -> reflector -> curator on a playbook over the LLM simulator (HTTP), offline
over the train cases and online over the val stream; the reflector's tags merged as counters,
concurrent deltas merged onto the newest playbook, a malformed reflection failing only its node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoforge.evaluators.task import load_task
from evoforge.evaluators.task_model import TaskModule
from evoforge.flows.cli import main
from evoforge.infra.ace_format import parse_reflection
from evoforge.infra.artifacts.playbook import parse_playbook
from evoforge.infra.failure_reasons import INTERNAL, MALFORMED, NO_EDIT
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED, FAILED
from evoforge.stages.algorithms import algorithm_named
from evoforge.stages.curator import CuratorData
from evoforge.stages.generate_data import GenerateData
from evoforge.stages.reflector import ReflectorData
from tests.helpers import read_nodes, read_status

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, sim: SimulatorProcess, evals: int, ace: dict, seed: int = 1) -> Path:
    run_dir = tmp_path / "run"
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"ace": ace}))
    code = main(["run", "unit_playbook", "--algorithm", "ace", "--config", str(config), "--run-dir",
                 str(run_dir), "--workspace", str(tmp_path / "ws"), "--llm-base-url", sim.base_url,
                 "--max-evals", str(evals), "--workers", "curator=4,engineer=2", "--seed", str(seed),
                 "--quiet", "--no-mlflow"])
    assert code == 0
    return run_dir


def _bullets(playbook: str) -> dict:
    return {b.id: b for bullets in parse_playbook(playbook).values() for b in bullets}


def test_ace_declares_its_roles_for_playbooks_only():
    algorithm = algorithm_named("ace")
    assert algorithm.pipeline().names() == ["generate", "reflector", "curator", "engineer", "reflect"]
    assert algorithm.evolves("playbook") and not algorithm.evolves("text")


def test_offline_ace_walks_the_train_cases_tags_bullets_and_merges_concurrent_deltas(tmp_path):
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        run_dir = _run(tmp_path, sim, 14, {"mode": "offline", "batch": 2})
    nodes = read_nodes(run_dir)
    by_id = {n.id: n for n in nodes}
    seed = next(n for n in nodes if n.origin == "seed")
    train = TaskModule(load_task("unit_playbook")).ids("train")
    steps = {}
    for node in nodes:
        data = GenerateData.peek(node)
        if data.step >= 0:
            assert data.step not in steps, "a step of the stream was handed out twice"
            steps[data.step] = data
            assert data.mode == "offline" and data.lap == 1
            assert data.cases == train[2 * data.step: 2 * data.step + 2]  # the train cases, in order
    assert sorted(steps) == list(range(len(steps))) and len(steps) >= 13
    evaluated = [n for n in nodes if n.status == EVALUATED and n.origin != "seed"]
    assert len(evaluated) == 13
    for node in evaluated:
        reflected, curated = ReflectorData.peek(node), CuratorData.peek(node)
        assert reflected.insight and reflected.tokens_in > 0
        parent = by_id[node.parent_id]
        before, after = _bullets(parent.code), _bullets(node.code)
        assert set(before) <= set(after)  # grown by deltas, never rewritten
        # the reflector's tags reached the playbook as counters, one each; only a delta merged onto
        # a newer playbook may drop a tag: one naming a bullet another branch added, not in that one
        lost = [b for b, _ in reflected.tags if b not in after]
        assert curated.tags_dropped == len(lost) and curated.tags_merged == len(reflected.tags) - len(lost)
        assert not lost or curated.rebased_from is not None
        for bullet_id, tag in reflected.tags:
            if bullet_id in after and bullet_id in before:
                assert getattr(after[bullet_id], tag) >= getattr(before[bullet_id], tag) + 1
            elif bullet_id in after:  # a bullet of the newer playbook the delta was merged onto
                assert curated.rebased_from is not None and getattr(after[bullet_id], tag) >= 1
        if curated.rebased_from is not None:  # merged onto the newest playbook, not the one generated on
            assert curated.rebased_from != node.parent_id and curated.rebased_from in by_id
    assert any(CuratorData.peek(n).rebased_from for n in evaluated)  # steps ran at once and merged
    assert any(ReflectorData.peek(n).tags for n in evaluated)
    status = read_status(run_dir)
    assert status["best_score"] > seed.score_full == 0.125
    stream = status["sinks"]["ace-stream"]
    assert stream["steps"] == len(steps) and stream["online_score"] is None
    scores = [s for d in steps.values() for s in d.scores]
    mean = pytest.approx(sum(scores) / len(scores), abs=1e-6)
    assert stream["laps"]["1"] == {"cases": len(scores), "mean_score": mean}


def test_online_ace_answers_each_val_case_once_in_order_before_learning_from_it(tmp_path):
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=5)) as sim:
        run_dir = _run(tmp_path, sim, 12, {"mode": "online", "batch": 1}, seed=2)
    val = TaskModule(load_task("unit_playbook")).ids("val")
    steps = {d.step: d for d in (GenerateData.peek(n) for n in read_nodes(run_dir)) if d.step >= 0}
    assert all(d.mode == "online" and d.cases == [val[step]] for step, d in steps.items())
    first = [s for d in steps.values() if d.lap == 1 for s in d.scores]
    stream = read_status(run_dir)["sinks"]["ace-stream"]
    assert stream["online_score"] == pytest.approx(sum(first) / len(first), abs=1e-6)
    assert "ace online stream" in (run_dir / "run.log").read_text()


def test_a_malformed_reflection_fails_its_node_with_the_reason_and_the_run_goes_on(tmp_path):
    config = SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=7, error_rate=0.35,
                       error_kinds=("malformed",))
    with SimulatorProcess(config) as sim:
        run_dir = _run(tmp_path, sim, 10, {"batch": 1})
    nodes = read_nodes(run_dir)
    broken = [n for n in nodes if n.status == FAILED and n.failed_stage == "reflector"]
    assert broken and all(n.error.startswith("reflector: unusable answer:") for n in broken)
    assert all(n.reason in (NO_EDIT, MALFORMED) for n in broken)  # the answer's fault, never "internal"
    assert INTERNAL not in read_status(run_dir)["failures_by_reason"]
    log = (run_dir / "run.log").read_text()
    assert all(f"reflector on {n.id}: unusable answer ({n.reason})" in log for n in broken)
    assert "the answer begins:" in log
    assert sum(n.status == EVALUATED for n in nodes) == 10


def test_a_reflection_must_carry_an_insight():
    with pytest.raises(ValueError, match="no 'key_insight'"):
        parse_reflection('{"bullet_tags": []}')
    neutral = '{"key_insight": "x", "bullet_tags": [{"id": "a-1", "tag": "neutral"}]}'
    assert parse_reflection(neutral).tags == []


def test_a_resumed_ace_run_goes_on_along_the_stream(tmp_path):
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        run_dir = _run(tmp_path, sim, 6, {"batch": 2})
        before = {n.id for n in read_nodes(run_dir) if n.status == EVALUATED}
        assert _run(tmp_path, sim, 10, {"batch": 2}) == run_dir
    nodes = read_nodes(run_dir)
    steps = [GenerateData.peek(n).step for n in nodes if n.status == EVALUATED and n.origin != "seed"]
    assert len(steps) == 9 and len(set(steps)) == 9  # no step of the stream learned from twice
    resumed = [GenerateData.peek(n).step for n in nodes if n.status == EVALUATED and n.id not in before]
    done = [GenerateData.peek(n).step for n in nodes if n.id in before]
    assert resumed and min(resumed) > max(done)
