"""A task folder's `.evoforgeignore` decides what a candidate's copy of it holds in a local run,
as it decides what a Dask run ships (tests/test_dask_task_shipping.py)."""

from __future__ import annotations

import asyncio
import shutil

from evoforge.evaluators.evaluation import evaluate_program
from evoforge.evaluators.task_files import TaskFiles
from tests.guard_tasks import make_task

SEES = '''
from pathlib import Path

def evaluate(program_path):
    here = Path(program_path).parent
    return {"combined_score": 1.0, "kept": float((here / "data" / "cases.txt").is_file()),
            "raw": float((here / "raw").exists()), "log": float((here / "notes.log").exists())}
'''


def test_a_candidates_copy_of_the_task_leaves_out_what_the_ignore_file_lists(tmp_path):
    task = make_task(tmp_path / "task", evaluator=SEES, task_yaml=None)
    (task.root / "data").mkdir()
    (task.root / "data" / "cases.txt").write_text("1 2 3\n")
    (task.root / "raw").mkdir()
    (task.root / "raw" / "huge.bin").write_bytes(b"\0" * 1024)
    (task.root / "notes.log").write_text("noise\n")
    (task.root / ".evoforgeignore").write_text("raw/\n*.log\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outcome = asyncio.run(evaluate_program(task, task.initial_code, scratch_root=scratch))
    assert outcome.ok, outcome.error
    assert outcome.metrics["kept"] == 1.0 and outcome.metrics["raw"] == 0.0 and outcome.metrics["log"] == 0.0


def test_the_copy_ignore_keeps_everything_without_an_ignore_file_but_the_caches(tmp_path):
    root = tmp_path / "task"
    (root / "__pycache__").mkdir(parents=True)
    (root / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (root / ".env").write_text("A=1\n")  # a local copy refuses nothing: shipping to Dask does
    (root / "evaluator.py").write_text("\n")
    shutil.copytree(root, tmp_path / "copy", ignore=TaskFiles.of(root).copy_ignore(root))
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == [".env", "evaluator.py"]


def test_an_ignore_file_pathspec_cannot_read_is_a_one_line_task_error(tmp_path, capsys):
    from evoforge.flows.cli import main

    task = make_task(tmp_path / "task", task_yaml=None)
    (task.root / ".evoforgeignore").write_text("*.log\n!\n")
    code = main(["run", str(task.root), "--run-dir", str(tmp_path / "run"), "--max-evals", "1", "--quiet",
                 "--no-mlflow", "--workspace", str(tmp_path / "ws")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"evoforge: error: task folder {task.root}: .evoforgeignore: ")
    assert "Invalid git pattern: '!'" in err[-1] and not (tmp_path / "run").exists()
