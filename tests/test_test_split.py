"""The `test` split of a task scored by a task model: after the search, the `promotion.final_top`
best candidates by val score (ties: node id) run once on the test cases, through the run's task
model (its calls counted in `status.json` `task_model`); the scores go to the final table, never
onto a node, and report.md shows them beside the val scores with the task model's usage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evoforge.flows.final_report import ranked, winners
from evoforge.infra.nodes import EVALUATED, FAILED, SPECULATIVE, Node
from evoforge.infra.nodestore import FinalScore, NodeStore
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.reports.task_model_report import USAGE_LABELS

TEST_CASES = 60  # house_style's test split (tests/test_house_style_task.py pins it)
VAL_CASES = 40


def _node(node_id: str, score: float | None, status: str = EVALUATED, partial: float | None = None) -> Node:
    return Node(id=node_id, run_id="r", code=node_id, status=status, score_full=score, score_partial=partial)


def _pool(nodes: list[Node], maximize: bool = True) -> Pool:
    pool = Pool(maximize=maximize)
    for node in nodes:
        pool.add(node)
    return pool


def _row(node_id: str, rank: int, score: float | None, error: str | None = None) -> FinalScore:
    return FinalScore(node_id, rank, score, {}, error, 1.0, 0.0, 0.0)


def test_the_winners_are_the_best_by_val_score_with_ties_by_node_id() -> None:
    nodes = [_node("d", 0.5), _node("c", 0.9), _node("b", 0.7), _node("a", 0.9), _node("e", 0.1),
             _node("s", None, SPECULATIVE, partial=1.0)]  # a speculative node is not yet a winner
    assert [n.id for n in winners(_pool(nodes), 3)] == ["a", "c", "b"]
    assert [n.id for n in winners(_pool(nodes, maximize=False), 2)] == ["e", "d"]
    assert winners(_pool(nodes), 0) == [] and len(winners(_pool(nodes), 50)) == 5


def test_the_winners_see_no_failed_node_and_no_held_out_score() -> None:
    pool = _pool([_node("a", 0.2), _node("b", 0.4)])
    pool.nodes.append(_node("f", None, FAILED))
    # the only input is the pool: a recorded test score (even a perfect one) cannot change the choice
    assert [n.id for n in winners(pool, 2)] == ["b", "a"]


def test_a_resumed_report_keeps_recorded_scores_and_ranks_earlier_winners_after() -> None:
    chosen = [_node("new", 1.0), _node("old1", 0.8)]
    recorded = [_row("old1", 1, 0.7), _row("old2", 2, 0.6), _row("old3", 3, None, "task model: down")]
    fresh = [_row("new", 1, 0.95)]
    rows = ranked(chosen, fresh, recorded)
    assert [(r.node_id, r.rank, r.score) for r in rows] == [
        ("new", 1, 0.95), ("old1", 2, 0.7), ("old2", 3, 0.6), ("old3", 4, None)]


def _run(tmp_path: Path, name: str, max_evals: int, config: str | None = None) -> Path:
    from evoforge.flows.cli import main
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess

    run_dir = tmp_path / name
    extra = []
    if config is not None:
        (tmp_path / f"{name}.yaml").write_text(config)
        extra = ["--config", str(tmp_path / f"{name}.yaml")]
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        code = main(["run", "house_style", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--llm-base-url", sim.base_url, "--max-evals", str(max_evals), "--workers",
                     "research=4,engineer=2", "--seed", "1", "--quiet", "--no-mlflow", *extra])
    assert code == 0
    return run_dir


def _finals(run_dir: Path) -> list[FinalScore]:
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        return store.final_scores()


def _node_calls(nodes: list[Node]) -> int:
    """The task-model calls the search's evaluations made (each counted on its node)."""
    ran = [n for n in nodes if n.was_evaluated and RepeatData.peek(n).repeat_of is None]
    return int(sum(n.metrics.get("task_model_calls", 0) for n in ran))


@pytest.fixture(scope="module")
def tested_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _run(tmp_path_factory.mktemp("test_split"), "run", 10)


@pytest.mark.slow
def test_the_winners_by_val_are_run_once_on_the_test_cases_into_the_final_table(tested_run: Path) -> None:
    from tests.helpers import read_nodes, read_status

    nodes, status, finals = read_nodes(tested_run), read_status(tested_run), _finals(tested_run)
    scored = sorted((n for n in nodes if n.status == EVALUATED and n.score_full is not None),
                    key=lambda n: (-n.score_full, n.id))  # type: ignore[operator]
    assert [f.node_id for f in finals] == [n.id for n in scored[:3]]  # final_top: 3, by val alone
    assert [f.rank for f in finals] == [1, 2, 3]
    for f in finals:
        assert f.error is None and f.score is not None and 0.0 <= f.score <= 1.0
        assert f.metrics["cases_scored"] == TEST_CASES
        assert f.metrics["task_model_calls"] + f.metrics["task_model_cached"] == TEST_CASES
    tested = sum(f.metrics["task_model_calls"] for f in finals)
    assert tested == 3 * TEST_CASES  # no test case is in any cache: the search never ran one
    # the test calls are the run's too (status.json), and on no node
    assert status["task_model"]["calls"] == _node_calls(nodes) + tested
    assert all(n.metrics.get("cases_scored", 0) <= VAL_CASES for n in nodes)
    assert not any(k.startswith("test") for n in nodes for k in n.metrics)


@pytest.mark.slow
def test_report_md_shows_the_test_scores_beside_val_and_the_task_models_usage(tested_run: Path) -> None:
    from evoforge.flows.cli import main
    from tests.helpers import read_nodes, read_status

    by_id = {n.id: n for n in read_nodes(tested_run)}
    usage = read_status(tested_run)["task_model"]
    for _ in range(2):  # as the run wrote it, and again by `evoforge report`
        text = (tested_run / "report.md").read_text()
        assert "## Test scores — held-out cases, evaluated once after the search" in text
        for f in _finals(tested_run):
            assert (f"| {f.rank} | `{f.node_id}` | {by_id[f.node_id].score_full:.6g} | {f.score:.6g} | "
                    f"{TEST_CASES} | {int(f.metrics['task_model_calls'])} (") in text
        section = text.split("## Task model", 1)[1].split("\n## ", 1)[0]
        shown = dict(re.findall(r"^\| ([^|]+?) \| ([0-9.e+-]+) \|$", section, re.M))
        assert {k: float(shown[USAGE_LABELS[k]]) for k in usage} == pytest.approx(usage)
        assert float(shown["calls"]) == usage["calls"] > 3 * TEST_CASES
        assert main(["report", str(tested_run)]) == 0


@pytest.mark.slow
def test_final_top_0_runs_no_test_case(tmp_path: Path) -> None:
    from tests.helpers import read_nodes, read_status

    run_dir = _run(tmp_path, "off", 8, "promotion: {final_top: 0}\n")
    nodes, status = read_nodes(run_dir), read_status(run_dir)
    assert _finals(run_dir) == []
    assert status["task_model"]["calls"] == _node_calls(nodes) == 8 * VAL_CASES
    assert "No test evaluation ran" in (run_dir / "report.md").read_text()


@pytest.mark.parametrize(("kind", "gated", "test_section"), [
    ("text", False, True), ("playbook", False, True), ("program", False, False), ("program", True, False)])
def test_report_md_has_the_test_section_for_text_and_playbook_tasks_and_the_usage_for_any_task_model(
        tmp_path: Path, kind: str, gated: bool, test_section: bool) -> None:
    from evoforge.infra.runfiles import RunPaths
    from evoforge.stages.reports.run_report import RunFacts, write_report

    usage = {"calls": 12, "cached": 3, "failed": 1, "tokens_in": 400, "tokens_out": 50, "seconds": 1.5,
             "cost_usd": 0.0012}
    facts = RunFacts("t", True, "pilot" if gated else "full", gated, kind, usage)
    text, _ = write_report(RunPaths(tmp_path), [_node("a", 0.5)], [], facts, "a")
    assert ("No test evaluation ran" in text) == test_section
    assert "| cached (served again, not paid) | 3 |" in text and "| dollars | 0.0012 |" in text
    without, _ = write_report(RunPaths(tmp_path), [_node("a", 0.5)], [], RunFacts("t", True), "a")
    assert "## Task model" not in without and "## Test scores" not in without
