"""The CPU floor of one candidate in the orchestrator: each unit of per-candidate work, alone.

Measures, in this process (RUSAGE_SELF, after a warm-up), the CPU of: one Prefect task run (what
a stage or an evaluation costs to show in the Prefect UI), one MLflow candidate run as the
MLflow sink writes it (8 runs per bulk transaction, with params, metrics, tags and text
artifacts), one LLM trace, one MiniLM embedding of a short text (a lesson or a query) and one
node's share of a node database flush (8 nodes per transaction). A candidate of a default run
makes one task run (its evaluation), one MLflow run, 2 traces, ~2 embeddings and one node row;
the table prints that sum as the floor.

    python bench/orchestrator_floor.py --n 100
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-floor-prefect-"))

from evoforge.flows import prefect_env  # noqa: E402,F401  (evoforge's Prefect settings)

PER_CANDIDATE = {"prefect task run": 1, "mlflow candidate run": 1, "llm trace": 2,
                 "minilm embedding": 2, "duckdb write (per node)": 1}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def prefect_task_run(n: int) -> float:
    """CPU ms of one no-op task run, with evoforge's task options, awaited in a flow."""
    from prefect import flow, task
    from prefect.utilities.annotations import opaque

    from evoforge.infra.prefect_tasks import TASK_OPTIONS

    @task(name="noop", task_run_name="noop-{label}", **TASK_OPTIONS)
    async def noop(label: str, payload: object) -> None:
        return None

    @flow(name="evoforge-floor", persist_result=False)
    async def measure() -> float:
        for i in range(10):
            await noop(str(i), opaque(object()))
        start = _cpu()
        for i in range(n):
            await noop(str(i), opaque(object()))
        return (_cpu() - start) / n

    return 1000 * asyncio.run(measure())


def mlflow_runs(n: int, root: Path, batch: int = 8) -> tuple[float, float]:
    """CPU ms of one candidate run and of one LLM trace, written as the MLflow sink writes them:
    `batch` candidates per `Tracker.log_runs` (one transaction for the runs, one for the spans)."""
    from evoforge.infra.llm_traces import LLMCall
    from evoforge.infra.tracking import ChildRun, Tracker

    code = "import numpy as np\n" + "def f(x):\n    return x * 2\n" * 60

    def candidates(k: int, traces: bool, name: str) -> float:
        tracker = Tracker(f"sqlite:///{root / 'mlflow.db'}", "floor", root / "mlartifacts", name)
        tracker.open()
        runs = []
        for i in range(k):
            calls = [LLMCall(stage="research", messages=[{"role": "user", "content": "go"}],
                             answer="diff", backend="openai", model="m", author="llm", tokens_in=900,
                             tokens_out=300, started_at=time.time(), seconds=0.3)] if traces else []
            run = ChildRun(f"node-{i}", {"node_id": f"n{i}", "parent": "p", "island": 0, "model": "m",
                                         "generation": 3, **{f"knob.k{j}": j for j in range(4)}},
                           {"score_full": 0.5, "eval_s": 0.2, "llm_s": 0.3, "tokens_in": 900.0,
                            "tokens_out": 300.0, **{f"m{j}": float(j) for j in range(10)}},
                           tags={"kind": "candidate", "node_id": f"n{i}", "status": "evaluated"},
                           texts={"program.py": code, "diff.txt": "-a\n+b\n", "motivation.md": "why",
                                  "analysis.md": "what happened"})
            runs.append((run, [], calls))
        start = _cpu()
        for i in range(0, k, batch):
            tracker.log_runs(runs[i:i + batch])
        spent = _cpu() - start
        tracker.terminate()
        return spent / k

    candidates(8, True, "warm-up")
    plain = candidates(n, False, "plain")
    traced = candidates(n, True, "traced")
    return 1000 * plain, 1000 * (traced - plain)


def minilm_embedding(n: int) -> float:
    from evoforge.cognition.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    text = "Place the larger circles along the edges first, then fill the gaps with smaller ones"
    embedder.embed([text + "."])
    texts = [f"{text} ({i} of them)." for i in range(n)]  # each new: nothing served from a cache
    start = _cpu()
    for one in texts:
        embedder.embed([one])
    return 1000 * (_cpu() - start) / n


def duckdb_commit(n: int, root: Path, batch: int = 8) -> float:
    """CPU ms per node of the node database's writes, `batch` nodes per transaction (a flush)."""
    from evoforge.infra.nodes import Node
    from evoforge.infra.nodestore import NodeStore

    store = NodeStore(root / "nodes.duckdb")
    code = "def f(x):\n    return x * 2\n" * 60
    nodes = [Node(id=f"n{i}", run_id="r", code=code, metrics={"score": 0.5}) for i in range(n + 10)]
    store.write(nodes[:10], {})
    start = _cpu()
    for i in range(0, n, batch):
        store.write(nodes[10 + i:10 + i + batch], {"pool_version": i})
    store.close()
    return 1000 * (_cpu() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100, help="repetitions of each unit")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evoforge-floor-"))
    run_ms, trace_ms = mlflow_runs(args.n, root)
    units = {"prefect task run": prefect_task_run(args.n), "mlflow candidate run": run_ms,
             "llm trace": trace_ms, "minilm embedding": minilm_embedding(min(args.n, 50)),
             "duckdb write (per node)": duckdb_commit(args.n, root)}
    print("| unit | CPU ms each | per candidate | CPU ms per candidate |")
    print("|---|---|---|---|")
    total = 0.0
    for name, ms in units.items():
        each = PER_CANDIDATE[name]
        total += ms * each
        print(f"| {name} | {ms:.1f} | {each:g} | {ms * each:.1f} |")
    print(f"| **floor** | | | **{total:.1f}** |")


if __name__ == "__main__":
    main()
