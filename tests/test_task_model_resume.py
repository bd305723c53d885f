"""A resumed text-task run takes over what its earlier sessions paid for: the task model's outputs
(kept in `<run>/task_model_cache.jsonl`, so no case is paid twice) and its usage (the run's totals
in `status.json` `task_model`)."""

from __future__ import annotations

import json

import pytest

from evoforge.evaluators.task_model_cache import CACHE_FILE
from evoforge.flows.cli import main
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.population.repeat_data import RepeatData
from tests.helpers import read_nodes, read_status

pytestmark = pytest.mark.slow


def _run(tmp_path, sim, evals: int) -> int:
    return main(["run", "house_style", "--run-dir", str(tmp_path / "run"), "--workspace",
                 str(tmp_path / "ws"), "--llm-base-url", sim.base_url, "--max-evals", str(evals),
                 "--workers", "research=4,engineer=2", "--seed", "1", "--quiet", "--no-mlflow"])


def test_a_resumed_run_reads_the_outputs_back_and_counts_every_session(tmp_path):
    run_dir = tmp_path / "run"
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        assert _run(tmp_path, sim, 5) == 0
        first = read_status(run_dir)["task_model"]
        lines = (run_dir / CACHE_FILE).read_text().splitlines()
        assert len(lines) == first["calls"] - first["failed"] > 0  # one line per output paid for
        assert _run(tmp_path, sim, 8) == 0
    status = read_status(run_dir)["task_model"]
    nodes = read_nodes(run_dir)
    paid = sum(n.metrics.get("task_model_calls", 0) for n in nodes
               if n.was_evaluated and RepeatData.peek(n).repeat_of is None)
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        paid += sum(f.metrics.get("task_model_calls", 0) for f in store.final_scores())
    assert status["calls"] == paid and status["calls"] > first["calls"]  # both sessions, each call once
    entries = [json.loads(line) for line in (run_dir / CACHE_FILE).read_text().splitlines()]
    assert len(entries) == status["calls"] - status["failed"]
    assert len({(key, case) for key, case, *_ in entries}) == len(entries)  # no output paid twice
    log = (run_dir / "run.log").read_text()
    assert f"task model: {len(lines)} outputs of earlier sessions cached" in log
