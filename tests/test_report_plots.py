"""`evoforge report` draws the run's plots and embeds them in report.md; the data behind each plot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from evoforge.flows.cli import main
from evoforge.infra.nodes import EVALUATED, FAILED, REJECTED, STALE, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths
from evoforge.infra.timeline import Timeline
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.population.stats import RunStats
from evoforge.stages.reports.figures import (
    ancestry,
    best_curve,
    failure_counts,
    lineage_data,
    throughput,
    wall_clock,
)
from tests.helpers import read_nodes

PNG = b"\x89PNG\r\n\x1a\n"
T0 = 1_700_000_000.0


def _node(node_id: str, parent: str | None, score: float | None, at: float | None, **kw) -> Node:
    return Node(id=node_id, run_id="r1", code=f"x = {node_id!r}\n", parent_id=parent, score_full=score,
                status=kw.pop("status", EVALUATED if score is not None else FAILED),
                origin=kw.pop("origin", "novel"), created_at=(at or T0 + 9) - 1, evaluated_at=at, **kw)


def _nodes() -> list[Node]:
    """seed -> a -> b (the best); seed -> c; a -> d, worse; and four that never scored."""
    overlap = ("evaluator raised ValueError: circle {} overlaps circle 2 by 0.{} "
               "(in evaluate(), evaluator.py:63)")
    return [
        _node("seed", None, 1.0, T0 + 1, origin="seed"),
        _node("a", "seed", 1.2, T0 + 2),
        _node("c", "seed", 0.9, T0 + 3),
        _node("f1", "a", None, T0 + 4, failed_stage="engineer", error=overlap.format(0, 57)),
        _node("b", "a", 1.5, T0 + 5),
        _node("d", "a", 1.1, T0 + 6),
        _node("f2", "b", None, T0 + 7, failed_stage="engineer", error=overlap.format(13, 4)),
        _node("r1", "b", None, None, failed_stage="research", error="the answer has no SEARCH block"),
        _node("dup", "b", None, None, status=REJECTED, failed_stage="engineer",
              error="rejected before evaluation: exact duplicate of node 4eb5d3619562"),
        _node("old", "seed", None, None, status=STALE,
              owned={"staleness": StalenessData(note="guarded: dropped")}),
    ]


def _run_folder(tmp_path: Path, nodes: list[Node], timeline: list[tuple[float, float, int]]) -> Path:
    """A finished run's folder written directly: node database, status.json and timeline."""
    run_dir = tmp_path / "run"
    paths = RunPaths(run_dir)
    run_dir.mkdir()
    with NodeStore(paths.db) as store:
        store.write(nodes, {"task": "circle_packing", "direction": "maximize", "run_id": "r1"})
    paths.status.write_text(json.dumps({"state": "finished", "best_node": "b", "search_level": "full"}))
    line = Timeline(paths.timeline, session=T0)
    for t, wall_s, finished in timeline:
        line.append({"wall_s": wall_s, "evaluations": finished, "engineer_workers": 2, "engineer_busy": 1,
                     "engineer_queue": finished % 3, "engineer_finished": finished}, t=t)
    return run_dir


def test_report_embeds_every_plot_as_an_existing_png(tmp_path, capsys):
    run_dir = _run_folder(tmp_path, _nodes(), [(T0 + 2 * i, 2.0 * i, i) for i in range(1, 6)])
    assert main(["report", str(run_dir)]) == 0
    text = (run_dir / "report.md").read_text()
    assert text == capsys.readouterr().out  # what it printed is what it wrote
    links = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
    assert sorted(links) == sorted(f"report/{n}.png" for n in
                                   ("best_score", "lineage", "throughput", "queues_workers", "failures"))
    for link in links:
        data = (run_dir / link).read_bytes()
        assert data.startswith(PNG) and len(data) > 1000, link
    assert "the 3 programs from the seed to the best" in text  # b <- a <- seed
    assert "4 failed or rejected candidates" in text


def test_report_is_refused_while_the_run_holds_its_database(tmp_path, capsys):
    run_dir = _run_folder(tmp_path, _nodes(), [])
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from evoforge.infra.nodestore import NodeStore; "
         f"s = NodeStore({str(RunPaths(run_dir).db)!r}); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["report", str(run_dir)]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err.strip()
    assert err.startswith("evoforge: error: the run in") and "is going" in err and "\n" not in err
    assert not (run_dir / "report.md").exists()


def test_the_lineage_is_the_best_nodes_ancestry_up_to_the_seed():
    nodes = _nodes()
    assert ancestry("b", nodes) == ["b", "a", "seed"]
    assert ancestry("seed", nodes) == ["seed"]
    assert ancestry("missing", nodes) == []
    points, edges = lineage_data(nodes, "full")
    assert points["b"] == (5.0, 1.5) and points["seed"] == (1.0, 1.0)  # x: the evaluation index
    assert set(edges) == {("seed", "a"), ("seed", "c"), ("a", "b"), ("a", "d")}  # scored ones only


def test_the_lineage_survives_a_parent_cycle():
    looped = [_node("x", "y", 1.0, T0), _node("y", "x", 2.0, T0 + 1)]
    assert ancestry("y", looped) == ["y", "x"]


def test_failure_reasons_are_counted_by_stage_and_error_class():
    nodes = _nodes()
    counts = failure_counts(nodes)
    assert counts == {"engineer: ValueError: circle N overlaps circle N by N": 2,  # values differ
                      "research: the answer has no SEARCH block": 1,
                      "engineer: exact duplicate of node …": 1}
    assert sum(counts.values()) == RunStats.rebuild(nodes).failed  # status.json's nodes_failed


def test_best_curve_follows_the_direction_and_the_evaluation_order():
    nodes = _nodes()
    evals, _, best = best_curve(nodes, "full", maximize=True, to_wall=lambda t: t - T0)
    assert evals == [1, 2, 3, 4, 5, 6, 7] and best == [1.0, 1.2, 1.2, 1.2, 1.5, 1.5, 1.5]
    _, _, lowest = best_curve(nodes, "full", maximize=False, to_wall=lambda t: t - T0)
    assert lowest == [1.0, 1.0, 0.9, 0.9, 0.9, 0.9, 0.9]


def test_the_time_axis_squeezes_out_the_gap_between_two_sessions():
    rows = [{"t": T0 + 10, "wall_s": 10.0}, {"t": T0 + 20, "wall_s": 20.0},  # session 1
            {"t": T0 + 3600, "wall_s": 21.0}, {"t": T0 + 3610, "wall_s": 31.0}]  # an hour later
    to_wall = wall_clock(rows)
    assert to_wall(T0 + 15) == pytest.approx(15.0)
    assert to_wall(T0 + 1800) == pytest.approx(21.0)  # inside the gap: no further than the next line
    assert to_wall(T0 + 3605) == pytest.approx(26.0)
    assert to_wall(T0 + 5) == pytest.approx(5.0)  # before the first line (the seed): counted back


def test_throughput_is_items_per_minute_per_session():
    rows = [{"session": 1, "wall_s": 0.0, "stages": {"engineer": {"finished": 0}}},
            {"session": 1, "wall_s": 30.0, "stages": {"engineer": {"finished": 10}}},
            {"session": 2, "wall_s": 40.0, "stages": {"engineer": {"finished": 0}}},  # counts restart
            {"session": 2, "wall_s": 100.0, "stages": {"engineer": {"finished": 5}}}]
    (series,) = throughput(rows, window=1)
    assert series.label == "engineer" and list(series.y) == [20.0, 5.0]


@pytest.mark.slow
def test_a_real_run_writes_its_timeline_and_a_report_with_plots(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("cognition: {enabled: false}\nengine: {progress_interval_s: 0.3}\n")
    run_dir = tmp_path / "run"
    assert main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--config", str(config), "--max-evals", "12", "--seed", "2", "--quiet"]) == 0
    rows = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    assert len(rows) >= 2  # the first snapshot and the final one, ticks between
    walls, ts = [r["wall_s"] for r in rows], [r["t"] for r in rows]
    assert walls == sorted(walls) and ts == sorted(ts) and walls[-1] > walls[0]
    assert rows[-1]["evaluations"] == 12 and rows[-1]["stages"]["engineer"]["finished"] >= 11
    status = json.loads((run_dir / "status.json").read_text())
    assert rows[-1]["best_score"] == status["best_score"]  # the timeline holds status.json's numbers
    text = (run_dir / "report.md").read_text()  # written by the run's end
    for link in re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text):
        assert (run_dir / link).read_bytes().startswith(PNG)
    nodes = read_nodes(run_dir)
    chain = ancestry(status["best_node"], nodes)
    assert chain[-1] == next(n.id for n in nodes if n.origin == "seed")
    assert f"the {len(chain)} programs from the seed to the best" in text
    client = MlflowClient(f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}")  # the plots on the parent run
    (parent,) = [r for r in client.search_runs([client.get_experiment_by_name("evoforge/circle_packing")
                                                .experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    local = Path(client.download_artifacts(parent.info.run_id, "report", str(tmp_path / "artifacts")))
    assert sorted(p.name for p in local.iterdir()) == sorted(p.name for p in (run_dir / "report").iterdir())
    assert (local / "lineage.png").read_bytes() == (run_dir / "report" / "lineage.png").read_bytes()
