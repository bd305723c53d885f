"""What the learn and analyze stages cost, and whether the LLM is still kept busy with them on.

Runs circle_packing on the LLM simulator with learn + analyze on (the real MiniLM embedder, a
fresh cognition base seeded from the task) and off, at the same budget, several seeds; reports
proposals/min, the ratio to the LLM bound (slots / mean LLM latency of a research call), the
simulator's slot utilisation, the learn stage's seconds per candidate (retrieval: embedding the
query and searching LanceDB) and the analyze stage's (one more LLM call per evaluated candidate,
which competes with research for the simulator's slots), and the lessons written back.

    python bench/learn_analyze.py --median 2.0 --evals 60 --seeds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402

CONFIGS = {
    "off": {"cognition": {"enabled": False}, "analyze": {"enabled": False}},
    "learn+analyze": {},
}


def one_run(sim: SimulatorProcess, name: str, seed: int, args: argparse.Namespace, root: Path) -> dict:
    run_dir = root / f"{name}-{seed}"
    config = root / f"{name}-{seed}.yaml"
    config.write_text(json.dumps(CONFIGS[name]))
    sim.reset(seed=seed)
    before = sim.stats()
    workspace = root / f"ws-{name}-{seed}"  # a fresh cognition base per run
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(workspace),
                 "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", str(args.evals),
                 "--workers", f"research={args.slots},engineer=2", "--seed", str(seed), "--quiet",
                 "--no-mlflow"])
    after = sim.stats()
    status = json.loads((run_dir / "status.json").read_text())
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        nodes = store.all()
    requests = after["completed"] - before["completed"]
    calls_per_proposal = requests / max(1, status["proposals"])
    # the bound: every slot busy with the calls a proposal needs (research, plus analyze when on)
    bound = args.slots * 60 / (after["mean_latency_s"] * calls_per_proposal)
    wall = status["wall_s"]
    return {
        "config": name, "seed": seed, "exit": code, "evaluations": status["evaluations"],
        "proposals_per_min": status["proposals_per_min"], "bound_per_min": bound,
        "ratio_to_bound": status["proposals_per_min"] / bound,
        "slot_utilisation": (after["busy_slot_seconds"] - before["busy_slot_seconds"]) / (args.slots * wall),
        "llm_calls_per_proposal": calls_per_proposal, "designs": len(nodes) - 1,
        "learn_s_per_candidate": _per_item(status, "learn"),
        "analyze_s_per_candidate": _per_item(status, "analyze"),
        "lessons_written": status.get("lessons_written", 0), "best": status["best_score"],
    }


def _per_item(status: dict, stage: str) -> float:
    """A stage's busy seconds per item it finished (0 when the stage was off)."""
    return status.get(f"{stage}_busy_s", 0.0) / max(1, status.get(f"{stage}_finished", 1))


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--median", type=float, default=2.0)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--evals", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evoforge-bench-la-"))
    main(["run", "circle_packing", "--run-dir", str(root / "warmup"), "--workspace", str(root / "ws-warm"),
          "--max-evals", "2", "--quiet", "--no-mlflow"])  # Prefect's server and the model load outside timing
    rows = []
    with SimulatorProcess(SimConfig(median_s=args.median, sigma=0.6, slots=args.slots)) as sim:
        for seed in range(args.seeds):
            for name in CONFIGS:
                row = one_run(sim, name, seed, args, root)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"learn_analyze_m{args.median}.json").write_text(json.dumps(rows, indent=2))
    keys = ["proposals_per_min", "llm_calls_per_proposal", "ratio_to_bound", "slot_utilisation",
            "learn_s_per_candidate",
            "analyze_s_per_candidate", "lessons_written", "best"]
    print("| config | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name in CONFIGS:
        rs = [r for r in rows if r["config"] == name]
        print(f"| {name} | " + " | ".join(f"{statistics.mean(r[k] for r in rs):.3g}" for k in keys) + " |")


if __name__ == "__main__":
    main_bench()
