"""Many concurrent stage workers, one writer: the node database and status.json agree exactly.

Sixteen research workers and six engineers against the simulator (0.4 s, sixteen slots) put many
items in flight at once; only the commit coroutine writes the node database. Afterwards the
budget is met exactly, every node is stored once with a terminal status, every evaluated node
carries its score and every failed one its reason, and each status.json count equals the count
of the nodes it names.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from evoforge.flows.cli import main
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, REJECTED
from tests.helpers import read_nodes, read_status

BUDGET = 40


def test_many_concurrent_workers_leave_one_consistent_database(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with SimulatorProcess(SimConfig(median_s=0.4, sigma=0.3, slots=16, seed=9)) as sim:
        code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path),
                     "--llm-base-url", sim.base_url, "--max-evals", str(BUDGET),
                     "--workers", "research=16,engineer=6", "--seed", "3", "--quiet"])
    assert code == 0
    nodes = read_nodes(run_dir)
    status = read_status(run_dir)
    ids = [n.id for n in nodes]
    assert len(ids) == len(set(ids))
    evaluated = [n for n in nodes if n.was_evaluated]
    assert status["evaluations"] == BUDGET == len(evaluated)
    assert status["nodes_evaluated"] == sum(n.status == EVALUATED for n in nodes)
    assert status["failed_evaluation"] == sum(n.status == FAILED and n.failed_stage != "research"
                                              for n in evaluated)
    assert status["failed_research"] == sum(n.failed_stage == "research" for n in nodes)
    assert status["duplicates_rejected"] == sum(n.status == REJECTED for n in nodes)
    assert all(n.score_full is not None for n in nodes if n.status == EVALUATED)
    assert all(n.error for n in nodes if n.status == FAILED)
    # designed but not evaluated when the budget was met: kept for a continued run, never half-done
    assert all(n.status.terminal or (n.status == PROPOSED and not n.was_evaluated) for n in nodes), \
        Counter(str(n.status) for n in nodes)
    # research calls really overlapped: their busy seconds, summed over the workers, exceed the
    # run's wall time, so at some moment two or more ran at once (measured: 24-25 s in 6.2-6.7 s).
    # The timeline's few samples (every ~2 s) can all miss the overlap: one CI run saw at most 1.
    assert status["research_busy_s"] > 1.5 * status["wall_s"] > 0
