"""A run ships its task folder to Dask workers that have no copy of it: the workers (another
working directory, their own local directory) evaluate against their cached copy with real
scores, and a second run after the evaluator changed gets the new scores from the same workers."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("prefect_dask")  # the dask extra; the dev extra installs it

from distributed import Client, LocalCluster  # noqa: E402
from distributed.diagnostics.plugin import WorkerPlugin  # noqa: E402

from evoforge.flows.cli import main  # noqa: E402
from evoforge.stages.evaluation.dask_worker import CACHE_FOLDER  # noqa: E402
from evoforge.stages.evaluation.task_shipping import pack_task  # noqa: E402
from tests.guard_tasks import make_task  # noqa: E402
from tests.helpers import RUN_EVALUATOR, read_nodes  # noqa: E402

pytestmark = pytest.mark.slow

PROGRAM = """
# EVOLVE-BLOCK-START
def run():
    return {"combined_score": 0.25 + 0.5 * 0.5}
# EVOLVE-BLOCK-END
"""
BONUS = """
_plain = evaluate

def evaluate(program_path):
    return {"combined_score": _plain(program_path)["combined_score"] + 10.0}
"""


class HideTask(WorkerPlugin):
    """Moves the task folder away as the first evaluation starts on a worker: from then on no
    worker has the task at the path the run read it from."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish == "executing" and os.path.isdir(self.folder):
            with contextlib.suppress(FileNotFoundError):  # the other worker moved it first
                os.rename(self.folder, self.folder + "-moved")


def _program_score(code: str) -> float:
    space: dict = {}
    exec(compile(code, "program", "exec"), space)
    return space["run"]()["combined_score"]


def _run(tmp_path: Path, task: Path, address: str, name: str) -> Path:
    config = tmp_path / "c.yaml"
    config.write_text("cognition:\n  enabled: false\n")
    run_dir = tmp_path / name
    code = main(["run", str(task), "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--max-evals", "5", "--seed", "4", "--quiet", "--no-mlflow", "--config", str(config),
                 "--executor", "dask", "--dask-address", address])
    assert code == 0
    return run_dir


def _cached(dask_worker) -> dict[str, str]:
    """The worker's cache: digest -> its evaluator's text."""
    cache = Path(dask_worker.local_directory) / CACHE_FOLDER
    return {d.name: (d / "evaluator.py").read_text() for d in cache.iterdir() if not d.name.startswith(".")}


def test_workers_without_the_task_folder_evaluate_the_shipped_copy(tmp_path, monkeypatch):
    task = tmp_path / "home" / "task"
    make_task(task, program=PROGRAM, evaluator=RUN_EVALUATOR, task_yaml=None)
    moved = Path(str(task) + "-moved")
    (tmp_path / "workers").mkdir()
    monkeypatch.chdir(tmp_path / "workers")  # the worker processes start here
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      local_directory=str(tmp_path / "worker-local")) as cluster, Client(cluster) as client:
        (tmp_path / "flow").mkdir()
        monkeypatch.chdir(tmp_path / "flow")
        worker_pids = set(client.run(os.getpid).values())
        assert set(client.run(os.getcwd).values()) == {str(tmp_path / "workers")}
        client.register_plugin(HideTask(str(task)), name="hide-task")

        first = _run(tmp_path, task, cluster.scheduler_address, "run1")
        assert not task.exists() and moved.is_dir()  # the workers evaluated without it
        v1 = pack_task(moved).digest
        caches = client.run(_cached)
        (moved / "evaluator.py").write_text(RUN_EVALUATOR + BONUS)
        shutil.move(moved, task)
        v2 = pack_task(task).digest
        client.register_plugin(HideTask(str(task)), name="hide-task")  # hide it again at run 2's start

        second = _run(tmp_path, task, cluster.scheduler_address, "run2")
        assert not task.exists() and moved.is_dir()
        caches_after = client.run(_cached)

    for run_dir, bonus in ((first, 0.0), (second, 10.0)):
        evaluated = [n for n in read_nodes(run_dir) if n.was_evaluated]
        assert len(evaluated) == 5 and all(n.error is None for n in evaluated)
        assert {int(n.artifacts["evaluated_on"].rsplit(":", 1)[1]) for n in evaluated} <= worker_pids
        for node in evaluated:  # real scores: what the program returns, plus the evaluator's bonus
            assert node.score_full == pytest.approx(_program_score(node.code) + bonus)
    # every worker unpacked each version once, keyed by its hash, under its own local directory
    assert v1 != v2 and len(caches) == len(caches_after) == 2
    for address, cached in caches.items():
        assert set(cached) == {v1} and cached[v1] == RUN_EVALUATOR
        assert set(caches_after[address]) == {v1, v2} and caches_after[address][v2] == RUN_EVALUATOR + BONUS
