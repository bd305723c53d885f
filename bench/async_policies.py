"""Issue 3 benchmark: sync vs async staleness policies, speculation and adaptive workers, on the
LLM simulator, at the same evaluation budget, several seeds.

Part A (throughput, circle_packing: cheap evaluations, so the LLM server is the bound):
sync, async-full, async-guarded, async-reflective, async-full+adaptive, at a slow LLM (median
2 s) and a fast one (median 0.3 s). Part B (speculation, bin_packing: 40 validation cases, the
evaluators are the bound): without and with speculation (alpha 0.25, reordering w=3).

    python bench/async_policies.py --evals 150 --spec-evals 100 --seeds 3 [--part A|B|AB]

Reports proposals/min, accepted/min, validations/min (evaluations incl. pruned), wasted LLM and
evaluation seconds, the simulator's slot utilisation, and the ratio to the throughput bound
min(slots / mean LLM latency, evaluation workers / mean evaluation time).
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
from evoforge.infra.nodes import Node  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402

CONFIGS_A = {
    "sync": {"engine": {"mode": "sync"}},
    "async-full": {"staleness": {"policy": "full"}},
    "async-guarded": {"staleness": {"policy": "guarded", "max_staleness": 2}},
    "async-reflective": {"staleness": {"policy": "reflective"}},
    "async-full+adaptive": {"adaptive": {"enabled": True, "tau_s": 2.0}},
}
CONFIGS_B = {
    "async-full": {},
    "async-full+spec0.25": {"speculation": {"alpha_spec": 0.25}},
    "async-reflective+spec0.25+adaptive": {"staleness": {"policy": "reflective"},
                                           "speculation": {"alpha_spec": 0.25},
                                           "adaptive": {"enabled": True, "tau_s": 2.0}},
}


def _nodes(run_dir: Path) -> list[Node]:
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        return store.all()


def one_run(sim: SimulatorProcess, task: str, name: str, overrides: dict, seed: int,
            args: argparse.Namespace, root: Path, slots: int, setting: str) -> dict:
    run_dir = root / f"{setting}-{task}-{name}-{seed}"  # one folder per run: a reused one resumes
    config = root / f"{setting}-{task}-{name}-{seed}.yaml"
    config.write_text(json.dumps(_merged(json.loads(args.base_config), overrides)))  # JSON is YAML
    sim.reset(seed=seed)
    before = sim.stats()
    code = main(["run", task, "--run-dir", str(run_dir), "--workspace", str(root / "ws"),
                 "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals",
                 str(args.evals), "--workers", f"research={slots},engineer={args.engineers}",
                 "--seed", str(seed), "--quiet", "--no-mlflow"])
    after = sim.stats()
    status = json.loads((run_dir / "status.json").read_text())
    nodes = _nodes(run_dir)
    wall = status["wall_s"]
    completed = after["completed"] - before["completed"]
    llm_mean = (sum(n.llm_s for n in nodes) / max(1, sum(1 for n in nodes if n.llm_s > 0)))
    evaluated = [n.eval_s for n in nodes if n.was_evaluated]
    eval_mean = statistics.mean(evaluated) if evaluated else 0.0
    bound = min(slots / llm_mean if llm_mean else float("inf"),
                args.engineers / eval_mean if eval_mean else float("inf")) * 60
    return {
        "task": task, "config": name, "seed": seed, "exit": code, "wall_s": wall,
        "evaluations": status["evaluations"], "proposals": status["proposals"],
        "proposals_per_min": status["proposals_per_min"], "accepted_per_min": status["accepted_per_min"],
        "validations_per_min": status["candidates_per_min"],
        "wasted_llm_s": status["wasted_llm_s"], "wasted_eval_s": status["wasted_eval_s"],
        "patched_llm_s": status["patched_llm_s"], "dropped": status["dropped_stale"],
        "reflected": status["reflected"], "patched": status["patched"], "pruned": status["pruned"],
        "released": status["speculative_released"], "rolled_back": status["rolled_back"],
        "best": status["best_score"], "llm_requests": completed,
        "slot_utilisation": (after["busy_slot_seconds"] - before["busy_slot_seconds"]) / (slots * wall),
        "mean_llm_s": llm_mean, "mean_eval_s": eval_mean, "bound_per_min": bound,
        "ratio_to_bound": status["proposals_per_min"] / bound if bound else None,
        "adaptive_decisions": status.get("adaptive_decisions", 0),
    }


def _merged(base: dict, over: dict) -> dict:
    """`over` on top of `base`, section by section."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


def _table(rows: list[dict], keys: list[str]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["setting"], r["task"], r["config"]), []).append(r)
    head = "| setting | task | config | " + " | ".join(keys) + " |"
    lines = [head, "|" + "---|" * (3 + len(keys))]
    for (setting, task, config), rs in groups.items():
        cells = []
        for k in keys:
            vals = [r[k] for r in rs if isinstance(r[k], (int, float))]
            cells.append(f"{statistics.mean(vals):.3g}" if vals else "-")
        lines.append(f"| {setting} | {task} | {config} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--evals", type=int, default=60)
    parser.add_argument("--spec-evals", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--engineers", type=int, default=2)
    parser.add_argument("--part", default="AB")
    parser.add_argument("--settings", default="slow,fast", help="LLM settings to run: slow, fast")
    parser.add_argument("--spec-setting", default="fast", help="LLM setting of part B")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--base-config", default="{}",
                        help='config under each run\'s own, as JSON: \'{"analyze": {"enabled": false}}\'')
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evoforge-bench3-"))
    rows: list[dict] = []
    main(["run", "circle_packing", "--run-dir", str(root / "warmup"), "--workspace", str(root / "ws"),
          "--max-evals", "2", "--quiet", "--no-mlflow"])  # Prefect's server starts outside the timing
    plan = []
    medians = {"slow": 2.0, "fast": 0.3}
    if "A" in args.part:
        for setting in args.settings.split(","):
            plan += [(setting, medians[setting], "circle_packing", CONFIGS_A, args.evals)]
    if "B" in args.part:
        plan += [(args.spec_setting, medians[args.spec_setting], "bin_packing", CONFIGS_B,
                  args.spec_evals)]
    for setting, median, task, configs, evals in plan:
        sim_cfg = SimConfig(median_s=median, sigma=0.6, slots=args.slots)
        with SimulatorProcess(sim_cfg) as sim:
            for seed in range(args.seeds):
                for name, overrides in configs.items():
                    run_args = argparse.Namespace(**{**vars(args), "evals": evals})
                    row = one_run(sim, task, name, overrides, seed, run_args, root, args.slots, setting)
                    row["setting"] = setting
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"async_policies_{args.part}_{args.settings.replace(',', '-')}_{args.spec_setting}.json"
    (args.out / name).write_text(json.dumps(rows, indent=2))
    print(_table(rows, ["proposals_per_min", "accepted_per_min", "validations_per_min",
                        "slot_utilisation", "ratio_to_bound", "wasted_llm_s", "wasted_eval_s",
                        "best"]))
    print()
    print(_table(rows, ["dropped", "reflected", "patched", "pruned", "released", "rolled_back",
                        "adaptive_decisions", "mean_llm_s", "mean_eval_s", "bound_per_min"]))


if __name__ == "__main__":
    main_bench()
