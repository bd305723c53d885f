"""A `files` task against a `program` task at the defaults: throughput, how many answers the
kind turns into candidates, and what applying an answer costs.

Runs `tour_files` (two evolvable files) and `circle_packing` (one program) on the LLM simulator
(and, with `--offline`, without an LLM), with MLflow, Prefect task runs, cognition and the
Analyzer on, and reads each run's status.json and node database. Then times the artifact kind's
`apply` on the simulator's own answers (parse, route to the file, apply, check).

    python bench/files_kind.py --evals 100 --seeds 2 --offline
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.evaluators.task import load_task  # noqa: E402
from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.answers import build_answer  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402

TASKS = ("circle_packing", "tour_files")


def one_run(task: str, label: str, seed: int, args: argparse.Namespace, root: Path,
            base_url: str | None) -> dict:
    run_dir = root / f"{task}-{label}-{seed}"
    code = main(["run", task, "--run-dir", str(run_dir), "--workspace", str(root / "ws"),
                 *(["--llm-base-url", base_url] if base_url else []), "--max-evals", str(args.evals),
                 "--seed", str(seed), "--quiet"])
    status = json.loads((run_dir / "status.json").read_text())
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        nodes = store.all()
    seed_node = next(n for n in nodes if n.origin == "seed")
    evals = sorted(n.eval_s for n in nodes if n.was_evaluated and n.eval_s)
    return {"task": task, "llm": label, "seed": seed, "exit": code, "evaluations": status["evaluations"],
            "cand_per_min": status["candidates_per_min"], "proposals": status["proposals"],
            "unusable_answers": status["failed_research"], "failed_guard": status["failed_guard"],
            "failed_evaluation": status["failed_evaluation"],
            "eval_s_p50": round(statistics.median(evals), 4) if evals else None,
            "seed_score": seed_node.score_full, "best_score": status["best_score"]}


def apply_cost(task_name: str, answers: int) -> dict:
    """Mean and p95 ms of the kind's apply on `answers` simulator answers to the initial artifact."""
    task = load_task(task_name)
    rng = random.Random(0)
    prompt = task.artifact.show(task.initial_code) + "\nAnswer format: diff"
    texts = [build_answer(prompt, rng) for _ in range(answers)]
    times, failed = [], 0
    for text in texts:
        start = time.perf_counter()
        try:
            task.artifact.apply(task.initial_code, text)
        except ValueError:
            failed += 1
        times.append(1000 * (time.perf_counter() - start))
    times.sort()
    return {"task": task_name, "answers": answers, "apply_ms_mean": round(statistics.mean(times), 3),
            "apply_ms_p95": round(times[int(0.95 * len(times))], 3), "refused": failed}


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--median", type=float, default=0.3, help="simulator latency median (s)")
    parser.add_argument("--evals", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--offline", action="store_true", help="also run without an LLM")
    parser.add_argument("--json", type=Path, default=Path("bench/out/files_kind.json"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="evoforge-files-") as tmp:
        with SimulatorProcess(SimConfig(median_s=args.median, sigma=0.6, slots=8, seed=1)) as sim:
            for seed in range(args.seeds):
                for task in TASKS:
                    rows.append(one_run(task, "sim", seed, args, Path(tmp), sim.base_url))
                    print(json.dumps(rows[-1]), flush=True)
        for seed in range(args.seeds) if args.offline else ():
            for task in TASKS:
                rows.append(one_run(task, "offline", seed, args, Path(tmp), None))
                print(json.dumps(rows[-1]), flush=True)
    costs = [apply_cost(task, 500) for task in TASKS]
    for row in costs:
        print(json.dumps(row))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"runs": rows, "apply": costs}, indent=2))
    sys.exit(max(r["exit"] for r in rows))


if __name__ == "__main__":
    main_bench()
