"""GEPA on the LLM simulator at FlashEvolve's settings: asynchronous vs synchronous proposal
throughput, validation throughput with speculation (alpha = 0.25) vs without, the staleness
policies, and the cost per accepted prompt.

Runs `house_style --algorithm gepa` (the simulator is both the proposer and the task model, with
a lognormal latency of `--median` seconds) with 16 proposal workers (research, rollout, gate) and
8 evaluation workers, MLflow off, and reads status.json and the node database of each run.

    python bench/gepa_async.py --evals 40 --seeds 2 --median 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402
from evoforge.stages.population.staleness_data import StalenessData  # noqa: E402

WORKERS = "research=16,rollout=16,gate=16,engineer=8"  # FlashEvolve: 16 proposal, 8 evaluation workers
CONFIGS = {  # name -> (engine.mode, extra config)
    "sync": ("sync", {}),
    "async": ("async", {}),
    "async-spec": ("async", {"speculation": {"alpha_spec": 0.25}}),
    "guarded": ("async", {"staleness": {"policy": "guarded", "max_staleness": 2}}),
    "reflective": ("async", {"staleness": {"policy": "reflective"}}),
}


def one_run(name: str, seed: int, args: argparse.Namespace, root: Path, sim: SimulatorProcess) -> dict:
    mode, extra = CONFIGS[name]
    run_dir = root / f"{name}-{seed}"
    config = root / f"{name}.json"
    config.write_text(json.dumps({**extra, "cognition": {"enabled": False},
                                  "task_model": {"concurrency": args.slots}}))
    sim.reset(seed=seed)
    code = main(["run", "house_style", "--algorithm", "gepa", "--run-dir", str(run_dir), "--workspace",
                 str(root / "ws"), "--config", str(config), "--llm-base-url", sim.base_url, "--mode", mode,
                 "--max-evals", str(args.evals), "--workers", WORKERS, "--seed", str(seed), "--quiet",
                 "--no-mlflow"])
    status = json.loads((run_dir / "status.json").read_text())
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        nodes = store.all()
    minutes = status["wall_s"] / 60
    gated = sum(1 for n in nodes if n.status == "rejected" and n.failed_stage == "gate")
    accepted = status["nodes_evaluated"]
    used = status["task_model"]
    tokens = status["tokens_in"] + status["tokens_out"] + used["tokens_in"] + used["tokens_out"]
    return {"config": name, "seed": seed, "exit": code, "wall_s": round(status["wall_s"], 1),
            "proposals_per_min": round(status["proposals"] / minutes, 2),
            "validations_per_min": round(status["evaluations"] / minutes, 2),
            "accepted_per_min": round(accepted / minutes, 2), "gate_rejected": gated,
            "released": status["speculative_released"], "pruned": status["pruned"],
            "dropped_stale": status["dropped_stale"], "patched": status["patched"],
            "wasted_llm_s": round(status["wasted_llm_s"], 1),
            "wasted_eval_s": round(status["wasted_eval_s"], 1),
            "task_model_calls": used["calls"], "tokens": tokens,
            "tokens_per_accepted": round(tokens / max(accepted, 1)), "best": status["best_score"],
            "max_staleness_seen": max((StalenessData.peek(n).staleness for n in nodes), default=0)}


def summary(rows: list[dict]) -> str:
    keys = ["proposals_per_min", "validations_per_min", "accepted_per_min", "gate_rejected", "released",
            "pruned", "dropped_stale", "wasted_llm_s", "wasted_eval_s", "tokens_per_accepted", "best"]
    lines = ["| config | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for name in CONFIGS:
        mine = [r for r in rows if r["config"] == name]
        if mine:
            cells = [f"{statistics.mean(r[k] for r in mine):.3g}" for k in keys]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--median", type=float, default=0.5, help="simulator latency median (s)")
    parser.add_argument("--slots", type=int, default=32, help="requests the simulator serves at once")
    parser.add_argument("--evals", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--json", type=Path, default=Path("bench/out/gepa_async.json"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="evoforge-gepa-") as tmp, SimulatorProcess(
            SimConfig(median_s=args.median, sigma=0.6, slots=args.slots, seed=1)) as sim:
        for seed in range(args.seeds):
            for name in args.configs.split(","):
                rows.append(one_run(name, seed, args, Path(tmp), sim))
                print(json.dumps(rows[-1]), flush=True)
    print(summary(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main_bench()
