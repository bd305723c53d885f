"""The built-in two-file task tour_files, evaluated straight from copies of its folder."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TASK = Path(__file__).resolve().parents[1] / "evaluators" / "tasks" / "tour_files"
START, END = "# EVOLVE-BLOCK-START", "# EVOLVE-BLOCK-END"

# Imports the evaluator of the first folder the way the harness does, then evaluates every folder
# in this one process and prints the instance count and the results as JSON.
SCRIPT = """
import importlib.util, json, sys
folders = sys.argv[1:]
spec = importlib.util.spec_from_file_location("evaluator", folders[0] + "/evaluator.py")
evaluator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(evaluator)
results = [evaluator.evaluate(folder) for folder in folders]
print(json.dumps({"instances": len(evaluator.SIZES), "results": results}))
"""


def evaluate(*folders: Path) -> tuple[int, list[dict]]:
    """(number of instances, one result dict per folder), all evaluated in one fresh process."""
    done = subprocess.run([sys.executable, "-c", SCRIPT, *map(str, folders)], cwd=folders[0].parent,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    return answer["instances"], answer["results"]


def copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(TASK, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__")))


@pytest.fixture(scope="module")
def initial(tmp_path_factory: pytest.TempPathFactory) -> dict:
    instances, (result,) = evaluate(copy(tmp_path_factory.mktemp("initial"), "project"))
    return {"instances": instances, **result}


def test_task_yaml_names_the_two_evolvable_files_and_only_tour_py_has_markers():
    settings = yaml.safe_load((TASK / "task.yaml").read_text())
    assert settings["kind"] == "files" and settings["files"] == ["tour.py", "improve.py"]
    assert settings["objective"] == {"metric": "combined_score", "direction": "maximize"}
    tour, improve = (TASK / "tour.py").read_text(), (TASK / "improve.py").read_text()
    assert tour.count(START) == tour.count(END) == 1 and "def build_tour" in tour.split(START)[1]
    assert START not in improve and END not in improve


def test_the_initial_files_score_every_instance(initial):
    assert math.isfinite(initial["combined_score"]) and initial["combined_score"] > 1.0
    assert initial["valid_instances"] == initial["instances"]
    assert "error" not in initial


def test_an_improve_that_drops_a_city_scores_zero_with_the_reason(tmp_path):
    project = copy(tmp_path, "project")
    drop_city_3 = "def improve(points, tour):\n    return [c for c in tour if c != 3]\n"
    (project / "improve.py").write_text(drop_city_3)
    _, (result,) = evaluate(project)
    assert result["combined_score"] == 0.0
    assert "improve()" in result["error"] and "missing city 3" in result["error"]


def test_the_improvement_step_counts(tmp_path, initial):
    project = copy(tmp_path, "project")
    (project / "improve.py").write_text("def improve(points, tour):\n    return list(tour)\n")
    _, (result,) = evaluate(project)
    assert result["valid_instances"] == initial["instances"]
    assert result["mean_length"] == result["mean_built_length"]
    assert result["combined_score"] < initial["combined_score"]


def test_each_folder_is_scored_by_its_own_files_in_one_process(tmp_path):
    original, changed = copy(tmp_path, "original"), copy(tmp_path, "changed")
    improve = changed / "improve.py"
    improve.write_text(improve.read_text().replace("MAX_PASSES = 1 ", "MAX_PASSES = 5 ", 1))
    assert improve.read_text() != (original / "improve.py").read_text()
    _, (first, second, again) = evaluate(original, changed, original)
    assert second["combined_score"] != first["combined_score"]
    assert again == first
    cached = {path.name.split(".")[0] for path in original.glob("__pycache__/*")}
    assert cached <= {"evaluator"}  # the candidate's files leave no bytecode behind
