"""Duplicate evaluations of a run: nodes with equal normalised code that were both evaluated.

Runs `circle_packing` on the LLM simulator (and, with `--offline`, without an LLM) and counts,
from the run's node database, how many evaluations repeated a program an earlier node of the
run had already evaluated, beside the repeats served from earlier evaluations (status.json).

    python bench/repeat_evals.py --evals 120 --seeds 1 --offline
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402
from evoforge.stages.population.repeats import duplicate_evaluations  # noqa: E402


def duplicate_evaluations_of(run_dir: Path) -> tuple[int, int]:
    """(evaluations that repeated an evaluated program, evaluated nodes) of the run."""
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        nodes = store.all()
    return duplicate_evaluations(nodes), sum(n.was_evaluated for n in nodes)


def one_run(label: str, seed: int, args: argparse.Namespace, root: Path, base_url: str | None) -> dict:
    run_dir = root / f"{label}-{seed}"
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(root / "ws"),
                 *(["--llm-base-url", base_url] if base_url else []),
                 "--max-evals", str(args.evals),
                 "--workers", f"research={args.slots},engineer={args.engineers}",
                 "--seed", str(seed), "--quiet", "--no-mlflow"])
    status = json.loads((run_dir / "status.json").read_text())
    duplicates, evaluated = duplicate_evaluations_of(run_dir)
    return {"llm": label, "seed": seed, "exit": code, "evaluations": status["evaluations"],
            "evaluated_nodes": evaluated, "duplicate_evaluations": duplicates,
            "repeats_served": status.get("repeats", "n/a"), "proposals": status["proposals"],
            "rejected": status["duplicates_rejected"]}


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--median", type=float, default=0.3)
    parser.add_argument("--sigma", type=float, default=0.6)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--engineers", type=int, default=2)
    parser.add_argument("--evals", type=int, default=120)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--offline", action="store_true", help="also run without an LLM (offline proposer)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evoforge-bench-repeats-"))
    rows = []
    with SimulatorProcess(SimConfig(median_s=args.median, sigma=args.sigma, slots=args.slots)) as sim:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            sim.reset(seed=seed)
            rows.append(one_run("simulator", seed, args, root, sim.base_url))
            print(json.dumps(rows[-1]), file=sys.stderr)
    if args.offline:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rows.append(one_run("offline", seed, args, root, None))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print("| LLM | seed | evaluations | duplicate evaluations | repeats served | proposals |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['llm']} | {r['seed']} | {r['evaluations']} | {r['duplicate_evaluations']} | "
              f"{r['repeats_served']} | {r['proposals']} |")


if __name__ == "__main__":
    main_bench()
