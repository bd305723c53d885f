"""Speculative completion on Dask workers: a prefix that beats the reference is released to the
flow while the worker goes on, one that cannot is pruned there, and the decisions, scores and
released prefixes are those the loop executor makes on the same jobs; a whole run on a local
cluster releases and prunes."""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from pathlib import Path

import pytest

pytest.importorskip("prefect_dask")  # the dask extra; the dev extra installs it

from distributed import Client, LocalCluster  # noqa: E402
from prefect import flow  # noqa: E402
from prefect_dask import DaskTaskRunner  # noqa: E402

from evoforge.evaluators.sandbox import SandboxLimits  # noqa: E402
from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.config import RunConfig  # noqa: E402
from evoforge.infra.nodes import EVALUATED, PRUNED, ROLLED_BACK  # noqa: E402
from evoforge.stages.evaluation import dask_executor  # noqa: E402
from evoforge.stages.evaluation.job import EvalRequest, SpeculationRequest  # noqa: E402
from evoforge.stages.evaluation.prefect_tasks import TaskEvaluations  # noqa: E402
from evoforge.stages.population.speculation import Reference  # noqa: E402
from tests.guard_tasks import make_task  # noqa: E402
from tests.helpers import read_nodes, read_status  # noqa: E402

pytestmark = pytest.mark.slow

CASES = 8
PROGRAM = """
# EVOLVE-BLOCK-START
def level(case):
    return 0.5 + 0.01 * (case % 3)
# EVOLVE-BLOCK-END
"""
EVALUATOR = f"""
import importlib.util

def _load(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

def cases():
    return list(range({CASES}))

def evaluate_case(program_path, case):
    return {{"combined_score": float(_load(program_path).level(int(case)))}}

def evaluate(program_path):
    module = _load(program_path)
    return {{"combined_score": sum(float(module.level(c)) for c in range({CASES})) / {CASES}}}
"""
# at alpha 0.25 the prefix is 2 cases; the reference scores 0.5 on every case
CANDIDATES = {
    "better": "def level(case):\n    return 0.9\n",  # released at 2, confirmed at 8
    "worse": "def level(case):\n    return 0.1\n",  # pruned at 2
    "fades": "def level(case):\n    return 0.9 if case < 2 else 0.1\n",  # released at 2, pruned at 4
}


def _code(block: str) -> str:
    return f"# EVOLVE-BLOCK-START\n{block}# EVOLVE-BLOCK-END\n"


def _requests(tmp_path: Path) -> list[EvalRequest]:
    task = make_task(tmp_path / "task", program=PROGRAM, evaluator=EVALUATOR, task_yaml=None)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    reference = Reference("ref", 0.5, {str(c): 0.5 for c in range(CASES)}, maximize=True)
    spec = SpeculationRequest(alpha=0.25, prune=True, reference=reference)
    return [EvalRequest(node_id=name, code=_code(block), task=task, limits=SandboxLimits(timeout_s=60),
                        scratch=scratch, order=tuple(str(c) for c in range(CASES)), speculation=spec)
            for name, block in CANDIDATES.items()]


@flow(persist_result=False)
async def _evaluate(executor: str, requests: list[EvalRequest]) -> tuple[list, list]:
    """Each job with a release that records what reached the flow's loop (and on which thread),
    and whether the job's result had come back by then."""
    runner = TaskEvaluations(executor)
    loop_thread = threading.get_ident()
    released: list[tuple] = []

    async def one(request: EvalRequest):
        finished = False

        def release(partial: float, prefix: dict[str, float]) -> None:
            released.append((request.node_id, partial, dict(prefix), finished,
                             threading.get_ident() == loop_thread))

        report = await runner.run(request, release)
        finished = True
        return report

    reports = await asyncio.gather(*(one(r) for r in requests))
    return reports, released


def _summary(reports: list) -> list[tuple]:
    return [(r.outcome.score, r.outcome.cases_done, dict(r.outcome.case_scores), r.score_partial,
             r.pruned, r.released_at is not None) for r in reports]


def test_dask_jobs_release_and_prune_as_the_loop_executor_does(tmp_path):
    requests = _requests(tmp_path)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        with Client(cluster) as client:
            worker_pids = set(client.run(os.getpid).values())

        async def both():
            cfg = RunConfig.model_validate({"engine": {"executor": "dask", "dask_address": address}})
            async with dask_executor.dask_environment(cfg):  # one Prefect server for both flows
                on_loop = await _evaluate("loop", requests)
                on_dask = _evaluate.with_options(task_runner=DaskTaskRunner(address=address))
                return on_loop, await on_dask("dask", requests)

        (loop_reports, loop_released), (dask_reports, dask_released) = asyncio.run(both())

    assert all(r.worker is None for r in loop_reports)
    assert {int(r.worker.rsplit(":", 1)[1]) for r in dask_reports} <= worker_pids
    # the same decisions and numbers on either executor
    assert _summary(dask_reports) == _summary(loop_reports)
    better, worse, fades = _summary(dask_reports)
    assert better[:2] == (pytest.approx(0.9), CASES) and not better[4] and better[5]
    assert worse[1] == 2 and worse[4] and not worse[5]
    assert fades[1] == 4 and fades[4] and fades[5]
    # two releases reached the flow's event loop, each before its job's result, with the prefix
    assert sorted(dask_released) == sorted(loop_released)
    assert len(dask_released) == 2
    for node, partial, prefix, finished, on_loop in dask_released:
        assert node in ("better", "fades") and partial == pytest.approx(0.9)
        assert prefix == {"0": pytest.approx(0.9), "1": pytest.approx(0.9)}
        assert not finished and on_loop


def _run(tmp_path: Path, executor: str, *extra: str) -> Path:
    config = tmp_path / f"{executor}.yaml"
    config.write_text(json.dumps({"cognition": {"enabled": False}, "speculation": {"alpha_spec": 0.25}}))
    run_dir = tmp_path / f"run-{executor}"
    code = main(["run", str(tmp_path / "task"), "--run-dir", str(run_dir),
                 "--workspace", str(tmp_path / "ws"), "--config", str(config), "--max-evals", "14",
                 "--seed", "2", "--no-mlflow", "--quiet",
                 "--executor", executor, *extra])
    assert code == 0
    return run_dir


def test_a_run_on_a_local_cluster_releases_and_prunes(tmp_path):
    make_task(tmp_path / "task", program=PROGRAM, evaluator=EVALUATOR, task_yaml=None)
    runs = {executor: _run(tmp_path, executor, *extra)
            for executor, extra in (("loop", ()), ("dask", ("--workers", "engineer=2")))}
    prefix = math.ceil(0.25 * CASES)
    scores: dict[str, dict[str, float]] = {}
    for executor, run_dir in runs.items():
        nodes, status = read_nodes(run_dir), read_status(run_dir)
        pruned = [n for n in nodes if n.status == PRUNED]
        released = [n for n in nodes if n.speculative_at is not None]
        assert status["pruned"] == len(pruned) and status["speculative_released"] == len(released)
        assert status["confirmed"] + status["rolled_back"] == len(released)
        assert all(n.cases_done == prefix for n in pruned)
        assert all(n.cases_done == CASES for n in released if n.status == EVALUATED)
        assert all(n.status in (EVALUATED, ROLLED_BACK) for n in released)
        if executor == "dask":
            assert pruned and released, (len(pruned), len(released))
            assert all("evaluated_on" in n.artifacts for n in nodes if n.was_evaluated)
        scores[executor] = {n.code: n.score_full for n in nodes if n.status == EVALUATED}
    # a program evaluated fully by both runs has the same score on both
    both = scores["loop"].keys() & scores["dask"].keys()
    assert both  # the seed at least
    assert all(scores["loop"][c] == scores["dask"][c] for c in both)
