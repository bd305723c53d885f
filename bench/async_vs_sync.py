"""Async vs sync evolution on the LLM simulator, at the same evaluation budget.

Reports candidates/min, the simulator's slot utilisation over the run, and the orchestrator's
CPU seconds per candidate (this process: flow, stages, commit, MLflow thread; the evaluation
subprocesses, the simulator and Prefect's server process are not counted).

    python bench/async_vs_sync.py --median 2.0 --sigma 0.6 --slots 8 --evals 60 --seeds 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_run(sim: SimulatorProcess, mode: str, seed: int, args: argparse.Namespace, root: Path) -> dict:
    run_dir = root / f"{mode}-{seed}"
    sim.reset(seed=seed)
    before_stats = sim.stats()
    cpu0, wall0 = _cpu_self(), time.monotonic()
    base = root / "base.yaml"
    base.write_text(args.base_config)  # JSON is YAML
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(root / "ws"),
                 "--config", str(base),
                 "--llm-base-url", sim.base_url, "--max-evals", str(args.evals), "--mode", mode,
                 "--workers", f"research={args.slots},engineer={args.engineers}", "--seed", str(seed),
                 "--quiet", *([] if args.mlflow else ["--no-mlflow"])])
    cpu, wall = _cpu_self() - cpu0, time.monotonic() - wall0
    stats = sim.stats()
    status = json.loads((run_dir / "status.json").read_text())
    busy = stats["busy_slot_seconds"] - before_stats["busy_slot_seconds"]
    return {
        "mode": mode, "seed": seed, "exit": code,
        "evaluations": status["evaluations"], "proposals": status["proposals"],
        "run_wall_s": status["wall_s"], "candidates_per_min": status["candidates_per_min"],
        "best_score": status["best_score"],
        "slot_utilisation": busy / (args.slots * status["wall_s"]),
        "orchestrator_cpu_s_per_candidate": cpu / max(status["evaluations"], 1),
        "process_wall_s": wall, "mean_llm_latency_s": stats.get("mean_latency_s"),
    }


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--median", type=float, default=2.0)
    parser.add_argument("--sigma", type=float, default=0.6)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--engineers", type=int, default=2)
    parser.add_argument("--evals", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--mlflow", action="store_true", help="track in MLflow as a default run does")
    parser.add_argument("--base-config", default="{}",
                        help='config of every run, as JSON, e.g. \'{"analyze": {"enabled": false}}\'')
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evoforge-bench-"))
    rows = []
    with SimulatorProcess(SimConfig(median_s=args.median, sigma=args.sigma, slots=args.slots)) as sim:
        main(["run", "circle_packing", "--run-dir", str(root / "warmup"), "--workspace", str(root / "ws"),
              "--max-evals", "2", "--quiet", "--no-mlflow"])  # start Prefect's server outside the timing
        for seed in range(args.seeds):
            for mode in ("sync", "async"):
                row = one_run(sim, mode, seed, args, root)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"async_vs_sync_m{args.median}_s{args.slots}.json"
    (args.out / name).write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                             "rows": rows}, indent=2))
    print("| mode | seed | evals | cand/min | slot util | orch CPU s/cand | best |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['seed']} | {r['evaluations']} | {r['candidates_per_min']:.1f} | "
              f"{r['slot_utilisation']:.2f} | {r['orchestrator_cpu_s_per_candidate']:.3f} | "
              f"{r['best_score']:.4f} |")


if __name__ == "__main__":
    main_bench()
