"""Sampler ablation: each parent-sampling policy on circle packing, equal evaluation budget, 3 seeds.

Every run talks to the LLM simulator over HTTP (the offline proposer's answers, served with a
latency model), so only the search policy differs between rows. Writes best-score-vs-evaluations
curves as a PNG and the raw curves as JSON under --out, and prints a markdown table.

    python bench/sampler_ablation.py --evals 80 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

import yaml  # noqa: E402

from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402

# label -> the `search:` section of the run's config
POLICIES: dict[str, dict] = {
    "greedy": {"sampler": "greedy"},
    "uniform": {"sampler": "uniform"},
    "ucb1": {"sampler": "ucb1"},
    "ucb1(c=0.1)": {"sampler": "ucb1", "ucb1_c": 0.1},
    "ucb1+credit": {"sampler": "ucb1", "credit_weight": 1.0},
    "map_elites": {"sampler": "map_elites"},
    "islands": {"sampler": "islands"},
    "greedy+credit": {"sampler": "greedy", "credit_weight": 1.0},
}


def best_curve(run_dir: Path, evals: int) -> list[float | None]:
    """Best score after each evaluation (failed evaluations count), in the order they finished."""
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        done = sorted((n for n in store.all() if n.was_evaluated), key=lambda n: n.evaluated_at)
    best, curve = None, []
    for node in done[:evals]:
        if node.status == "evaluated" and node.score_full is not None:
            best = node.score_full if best is None else max(best, node.score_full)
        curve.append(best)
    return curve


def one_run(sim: SimulatorProcess, label: str, seed: int, args: argparse.Namespace, root: Path) -> dict:
    run_dir = root / f"{label.replace('(', '_').replace(')', '').replace('=', '')}-{seed}"
    config = root / f"{label.replace('(', '_').replace(')', '').replace('=', '')}.yaml"
    config.write_text(yaml.safe_dump({"search": POLICIES[label]}))
    sim.reset(seed=seed)
    started = time.monotonic()
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(root / "ws"),
                 "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", str(args.evals),
                 "--seed", str(seed), "--quiet", "--no-mlflow"])
    status = json.loads((run_dir / "status.json").read_text())
    curve = best_curve(run_dir, args.evals)
    return {"policy": label, "seed": seed, "exit": code, "wall_s": round(time.monotonic() - started, 1),
            "evaluations": status["evaluations"], "failed": status["nodes_failed"],
            "duplicates": status["duplicates_rejected"], "best": status["best_score"], "curve": curve}


def _at(curve: list, k: int) -> float | None:
    return curve[min(k, len(curve)) - 1] if curve else None


def _mean_sd(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.4f}" if values else "n/a"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def table(rows: list[dict], evals: int) -> str:
    """The markdown table: best score at fractions of the budget, mean ± sd over seeds."""
    marks = sorted({max(1, evals // 4), evals // 2, evals})
    head = "| policy | " + " | ".join(f"best @{m}" for m in marks) + " | per seed @" + str(evals) + \
           " | failed | dup. rejected | wall s |"
    lines = [head, "|" + "---|" * (len(marks) + 5)]
    for label in POLICIES:
        mine = [r for r in rows if r["policy"] == label]
        if not mine:
            continue
        cells = [_mean_sd([v for r in mine if (v := _at(r["curve"], m)) is not None]) for m in marks]
        seeds = ", ".join(f"{_at(r['curve'], evals):.4f}" for r in mine)
        failed = statistics.mean(r["failed"] for r in mine)
        dups = statistics.mean(r["duplicates"] for r in mine)
        wall = statistics.mean(r["wall_s"] for r in mine)
        lines.append(f"| {label} | " + " | ".join(cells)
                     + f" | {seeds} | {failed:.1f} | {dups:.1f} | {wall:.0f} |")
    return "\n".join(lines)


def plot(rows: list[dict], evals: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label in POLICIES:
        curves = [r["curve"] for r in rows if r["policy"] == label and r["curve"]]
        if not curves:
            continue
        xs = list(range(1, evals + 1))
        filled = [[_at(c, x) for x in xs] for c in curves]
        mean = [statistics.mean(v for v in col if v is not None) for col in zip(*filled, strict=True)]
        low = [min(v for v in col if v is not None) for col in zip(*filled, strict=True)]
        high = [max(v for v in col if v is not None) for col in zip(*filled, strict=True)]
        line, = ax.plot(xs, mean, label=label, linestyle="--" if "+" in label or "(" in label else "-")
        ax.fill_between(xs, low, high, alpha=0.12, color=line.get_color())
    ax.set_xlabel("evaluations")
    ax.set_ylabel("best sum of radii so far (mean of seeds; band: min-max)")
    ax.set_title(f"circle packing, {evals} evaluations, LLM simulator (offline proposer answers)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--evals", type=int, default=80)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evoforge-ablation-"))
    rows = []
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.3, slots=8)) as sim:
        main(["run", "circle_packing", "--run-dir", str(root / "warmup"), "--workspace", str(root / "ws"),
              "--max-evals", "2", "--quiet", "--no-mlflow"])  # start Prefect's server outside the runs
        for seed in range(args.seeds):
            for label in args.policies:
                row = one_run(sim, label, seed, args, root)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "curve"}), file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sampler_ablation.json").write_text(json.dumps({"evals": args.evals, "rows": rows}, indent=1))
    plot(rows, args.evals, args.out / "sampler_ablation.png")
    print(table(rows, args.evals))


if __name__ == "__main__":
    main_bench()
