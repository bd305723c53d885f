"""One `evoforge run` of a text or playbook task on the LLM simulator, and the figures every
task-model benchmark reads from it (bench/playbook_algorithms.py, bench/gepa_merge.py).

Sets PREFECT_HOME to a temporary directory and turns Prefect's analytics off before evoforge is
imported, as the other benchmarks do.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodes import Node  # noqa: E402
from evoforge.infra.nodestore import FinalScore, NodeStore  # noqa: E402


@dataclass
class Run:
    """A finished run: its exit code, status.json, nodes, held-out scores and outer seconds."""

    code: int
    status: dict[str, Any]
    nodes: list[Node]
    final: list[FinalScore]
    total_s: float
    sim_requests: int

    def by_id(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    def evaluated_in_order(self) -> list[Node]:
        """Every node that was evaluated (the seed included), in the order its evaluation ended."""
        return sorted((n for n in self.nodes if n.evaluated_at is not None), key=lambda n: n.evaluated_at)

    def evals_to(self, threshold: float) -> int | None:
        """Evaluations (the seed's is the first) until a val score of at least `threshold`."""
        for i, node in enumerate(self.evaluated_in_order(), 1):
            if node.score_full is not None and node.score_full >= threshold:
                return i
        return None

    def common(self) -> dict[str, Any]:
        """The figures every table has: best val, the winner's test score, tokens, seconds."""
        status, used = self.status, self.status["task_model"]
        evaluations = max(status["evaluations"], 1)
        tokens = status["tokens_in"] + status["tokens_out"] + used["tokens_in"] + used["tokens_out"]
        test_tokens = sum(int(f.metrics.get(f"task_model_tokens_{way}", 0))
                          for f in self.final for way in ("in", "out"))
        winner = self.final[0] if self.final else None
        return {"exit": self.code, "evaluations": status["evaluations"], "proposals": status["proposals"],
                "best_val": status["best_score"], "best_node": status["best_node"],
                "test_winner": None if winner is None or winner.score is None else round(winner.score, 4),
                "test_node": winner.node_id if winner else None,
                "tokens": tokens, "tokens_per_eval": round(tokens / evaluations),
                "search_tokens_per_eval": round((tokens - test_tokens) / evaluations),
                "llm_calls_counted": status["spending"]["calls"], "llm_calls_served": self.sim_requests,
                "wall_s": round(status["wall_s"], 1), "total_s": round(self.total_s, 1)}


def run_task(task: str, algorithm: str, config: dict[str, Any], seed: int, evals: int, run_dir: Path,
             workspace: Path, sim: SimulatorProcess) -> Run:
    """Run `task` with `algorithm` and `config` for `evals` evaluations; read what it left."""
    config_file = run_dir.with_suffix(".json")
    config_file.write_text(json.dumps(config))
    sim.reset(seed=seed)
    start = time.perf_counter()
    code = main(["run", task, "--algorithm", algorithm, "--run-dir", str(run_dir), "--workspace",
                 str(workspace), "--config", str(config_file), "--llm-base-url", sim.base_url,
                 "--max-evals", str(evals), "--seed", str(seed), "--quiet", "--no-mlflow"])
    total_s = time.perf_counter() - start
    requests = sim.stats()["requests"]
    status = json.loads((run_dir / "status.json").read_text())
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        nodes, final = store.all(), store.final_scores()
    return Run(code, status, nodes, final, total_s, requests)


def mean(values: list[float | int | None], spec: str = ".3f") -> str:
    """The mean of the values that are not None, formatted with `spec`, or "-" when none are."""
    known = [v for v in values if v is not None]
    return format(statistics.mean(known), spec) if known else "-"


def reached(values: list[int | None]) -> str:
    """'mean (k/n)' over the runs that reached, or 'not reached (0/n)'."""
    known = [v for v in values if v is not None]
    if not known:
        return f"not reached (0/{len(values)})"
    return f"{statistics.mean(known):.1f} ({len(known)}/{len(values)})"


def run_grid(prefix: str, median_s: float, seeds: int, variants: list[Any],
             one_run: Callable[[Any, int, Path, SimulatorProcess], dict]) -> list[dict]:
    """`one_run(variant, seed, root, sim)` for every seed and variant, on one simulator (median
    latency `median_s`, 8 requests at once), each row printed as it comes."""
    rows = []
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp, SimulatorProcess(
            SimConfig(median_s=median_s, sigma=0.6, slots=8, seed=1)) as sim:
        for seed in range(seeds):
            for variant in variants:
                rows.append(one_run(variant, seed, Path(tmp), sim))
                print(json.dumps(rows[-1]), flush=True)
    return rows


def finish(rows: list[dict], table: str, path: Path) -> None:
    """Print the table, keep the rows as JSON in `path`, exit with the worst run's code."""
    print(table)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=2))
    sys.exit(max(r["exit"] for r in rows))
