"""The habits of a CLI user: --version, `tasks`, a task name for a run folder, a JSON leaderboard,
and status text whose counts are the status.json values."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest

from evoforge.evaluators.task import builtin_task_names
from evoforge.flows.cli import main
from evoforge.flows.commands import EVALUATION_COUNTS, status_text
from tests.helpers import read_status


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    config = ws / "c.yaml"
    config.write_text("cognition: {enabled: false}\nanalyze: {enabled: false}\n")
    code = main(["run", "circle_packing", "--workspace", str(ws), "--max-evals", "8", "--seed", "4",
                 "--config", str(config), "--no-mlflow", "--quiet"])
    assert code == 0
    return ws


def test_version_names_the_installed_package(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"evoforge {metadata.version('evoforge')}"


def test_tasks_lists_every_built_in_task_with_its_objective(capsys):
    assert main(["tasks"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == builtin_task_names()
    digits = next(line for line in lines if line.startswith("digits"))
    assert "accuracy" in digits and "pilot/full/final" in digits
    tour = next(line for line in lines if line.startswith("tour_files"))
    assert tour.split()[1] == "files" and digits.split()[1] == "program"


@pytest.mark.slow
@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["leaderboard"], ["best"]])
def test_a_task_name_finds_its_run_in_the_workspace(workspace, capsys, command):
    assert main([command[0], str(workspace / "circle_packing"), *command[1:]]) == 0
    by_folder = capsys.readouterr().out
    assert main([command[0], "circle_packing", "--workspace", str(workspace), *command[1:]]) == 0
    assert capsys.readouterr().out == by_folder and by_folder.strip()


@pytest.mark.slow
def test_leaderboard_top_n_as_json_ranks_the_best_first(workspace, capsys):
    run_dir = workspace / "circle_packing"
    assert main(["leaderboard", str(run_dir), "--top", "3", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    status = read_status(run_dir)
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert rows[0]["node"] == status["best_node"] and rows[0]["score"] == status["best_score"]
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    assert all(r["level"] == "full" for r in rows)
    assert main(["leaderboard", str(run_dir), "--top", "2"]) == 0
    text = capsys.readouterr().out.strip().splitlines()
    assert len(text) == 2 and rows[0]["node"] in text[0]


@pytest.mark.slow
def test_status_text_counts_are_the_json_counts(workspace, capsys):
    run_dir = workspace / "circle_packing"
    assert main(["status", str(run_dir), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert main(["status", str(run_dir)]) == 0
    text = capsys.readouterr().out
    for label, key in EVALUATION_COUNTS:
        shown = re.search(rf"(\d+) {label}\b", text)
        assert shown is not None and int(shown.group(1)) == status[key], label
    failures = next(line for line in text.splitlines() if line.startswith("failures"))
    for reason, count in status["failures_by_reason"].items():  # each bucket as status.json has it
        shown = re.search(rf"(\d+) {re.escape(reason)}\b", failures)
        assert shown is not None and int(shown.group(1)) == count, reason
    assert sum(status["failures_by_reason"].values()) == status["nodes_failed"] + status["dropped_stale"]
    evaluated = sum(status[key] for _, key in EVALUATION_COUNTS)
    assert evaluated == status["evaluations"] == 8  # every evaluation is in exactly one count


def test_status_text_shows_each_count_under_its_key():
    status = {"task": "t", "run_id": "r", "state": "finished", "backend": "offline", "model": "m",
              "evaluations": 40, "max_evals": 40, "nodes_evaluated": 7, "failed_evaluation": 0,
              "nodes_failed": 6, "dropped_stale": 2, "pruned": 28, "rolled_back": 5,
              "failures_by_reason": {"guard": 3, "no edit found": 2, "stale": 2, "duplicate": 1},
              "best_score": 0.96, "best_node": "n", "candidates_per_min": 57.4, "wall_s": 41.8,
              "tokens_in": 10, "tokens_out": 5}
    lines = status_text(status).splitlines()
    assert lines[2] == "evaluations   40 / 40  (7 accepted, 0 failed, 28 pruned, 5 rolled back)"
    assert lines[3] == "not evaluated 8  (failed before an evaluation, rejected, or dropped as stale)"
    assert lines[4] == "failures      8  (3 guard, 2 no edit found, 2 stale, 1 duplicate)"
    assert "unusable answer" not in status_text(status)


def test_an_unknown_run_name_is_one_line_exit_2(tmp_path, capsys):
    assert main(["status", "no_such_task", "--workspace", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_task" in err[0] and str(tmp_path) in err[0]
