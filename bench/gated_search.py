"""Staged search (Optuna on the pilot + promotion to full) against full-data-only search.

Both searches explore the same number of structures of the built-in `digits` task with the same
proposer, plan agent and Optuna budget (12 trials per structure); the full-only search runs a
copy of the task whose only search stage is `full`. For each search and seed it reports the
evaluation CPU-seconds spent on the search (every structure's defaults, its trials and the
promotions; the final report excluded, both need it), the wall time, and its winner's full and
held-out final score. The final score of the full-only winner is measured here, the same way
the staged run's final report measures its own. It also reports what Optuna's trials were
worth over each structure's declared defaults, and the per-evaluation start-up cost (a sandboxed
process importing scikit-learn and loading the data), which no search can avoid today. "Model
CPU" is the evaluation CPU minus that fixed cost per evaluation, taken as the cheapest pilot
trial of the same seed (one fit on 126 images: almost all start-up), so it is a lower bound of
the fixed cost and the model CPU figures are upper bounds.

    python bench/gated_search.py --structures 12 --seeds 0,1,2
    python bench/gated_search.py --reuse /tmp/evoforge-staged-bench-XXXX   # re-read finished runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.evaluators.evaluation import evaluate_program  # noqa: E402
from evoforge.evaluators.task import builtin_tasks_dir, load_task  # noqa: E402
from evoforge.infra.nodes import EVALUATED, Node  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402
from evoforge.stages.engineer_data import EngineerData  # noqa: E402
from evoforge.stages.tuning.param_study import TuningData  # noqa: E402

STARTUP_BLOCK = '''# EVOLVE-BLOCK-START
from sklearn.dummy import DummyClassifier


def build_model():
    return DummyClassifier()
# EVOLVE-BLOCK-END
'''


def full_only_task(root: Path) -> Path:
    """A copy of `digits` whose search stage is `full` (no pilot, so no promotion)."""
    folder = root / "digits_full_only"
    shutil.copytree(builtin_tasks_dir() / "digits", folder, dirs_exist_ok=True)
    yaml = (folder / "task.yaml").read_text()
    yaml = yaml.replace("name: digits", "name: digits_full_only")
    yaml = yaml.replace("  pilot: {data_fraction: 0.1}\n", "")
    (folder / "task.yaml").write_text(yaml)
    return folder


def run(task: str, run_dir: Path, seed: int, structures: int, config: Path, home: Path) -> int:
    env = {**os.environ, "PREFECT_HOME": str(home)}
    argv = [sys.executable, "-m", "evoforge.flows.cli", "run", task, "--run-dir", str(run_dir),
            "--workspace", str(run_dir.parent / "ws"), "--config", str(config),
            "--max-evals", str(structures), "--seed", str(seed), "--quiet", "--no-mlflow"]
    return subprocess.run(argv, env=env, cwd=run_dir.parent, capture_output=True, text=True).returncode


def nodes_of(run_dir: Path) -> tuple[list[Node], list]:
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        return store.all(), store.final_scores()


def winner(nodes: list[Node]) -> Node:
    """The search's winner: best at full (the staged run's promoted candidates, or every node)."""
    scored = [n for n in nodes if n.status == EVALUATED and n.score_full is not None]
    return max(scored, key=lambda n: n.score_full)  # type: ignore[arg-type,return-value]


def final_score(task_dir: Path, node: Node) -> float | None:
    outcome = asyncio.run(evaluate_program(load_task(task_dir), node.code, level="final",
                                           params=node.params))
    return outcome.score


def optuna_gain(nodes: list[Node], stage: str) -> tuple[float, float, int]:
    """Mean gain of the best trial over the declared defaults, share improved, structures."""
    tuned = [n for n in nodes if n.status == EVALUATED and TuningData.peek(n).trials_run
             and EngineerData.peek(n).score_default is not None]
    gains = [n.score(stage) - EngineerData.peek(n).score_default for n in tuned]  # type: ignore[operator]
    if not gains:
        return 0.0, 0.0, 0
    return statistics.mean(gains), sum(g > 0 for g in gains) / len(gains), len(gains)


def cheapest_pilot(run_dir: Path) -> float:
    """The CPU seconds of the cheapest pilot trial of a staged run: the fixed cost of an evaluation."""
    cpus = [t["cpu_s"] for path in (run_dir / "param_trials").glob("*.json")
            for t in json.loads(path.read_text())["trials"] if t["cpu_s"] and t["source"] != "default"]
    return min(cpus)


def startup_cpu(repeats: int = 5) -> float:
    """CPU seconds of a pilot evaluation that fits nothing real: the fixed cost of one evaluation."""
    task = load_task(builtin_tasks_dir() / "digits")
    code = task.initial_code.split("# EVOLVE-BLOCK-START")[0] + STARTUP_BLOCK
    samples = []
    for _ in range(repeats):
        outcome = asyncio.run(evaluate_program(task, code, level="pilot"))
        if outcome.cpu_s is not None:
            samples.append(outcome.cpu_s)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", type=int, default=12)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--reuse", type=Path, default=None, help="re-read the runs of an earlier call")
    args = parser.parse_args()
    root = args.reuse or Path(tempfile.mkdtemp(prefix="evoforge-staged-bench-"))
    full_only = full_only_task(root)
    config = root / "c.yaml"
    config.write_text(json.dumps({"param_search": {"trials": args.trials},
                                  "plan": {"enabled": True}, "cognition": {"enabled": False}}))
    startup = startup_cpu()
    print(f"a sandboxed evaluation that fits nothing (process, scikit-learn import, data): "
          f"{startup:.2f} CPU-s")
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for name, task in (("staged", "digits"), ("full-only", str(full_only))):
            run_dir = root / f"{name}-{seed}"
            code = 0
            if args.reuse is None or not (run_dir / "status.json").is_file():
                code = run(task, run_dir, seed, args.structures, config, root / f"prefect-{name}-{seed}")
            fixed = cheapest_pilot(root / f"staged-{seed}")
            status = json.loads((run_dir / "status.json").read_text())
            nodes, finals = nodes_of(run_dir)
            best = winner(nodes)
            evaluations = len([n for n in nodes if n.was_evaluated]) + status["trials"] + status["promotions"]
            cpu = sum(n.eval_cpu_s for n in nodes)
            if name == "staged":
                final = next((f.score for f in finals if f.node_id == best.id), None)
                gain = optuna_gain(nodes, "pilot")
            else:
                final = final_score(full_only, best)
                gain = optuna_gain(nodes, "full")
            row = {"search": name, "seed": seed, "exit": code, "structures": status["evaluations"],
                   "evaluations": evaluations, "trials": status["trials"],
                   "promotions": status["promotions"], "eval_cpu_s": round(cpu, 1),
                   "fixed_cpu_s": round(fixed, 3),
                   "model_cpu_s": round(cpu - fixed * evaluations, 1), "wall_s": status["wall_s"],
                   "winner": best.id, "winner_full": best.score_full,
                   "winner_full_se": best.metrics.get("accuracy_se") if name == "full-only" else None,
                   "winner_final": final, "optuna_gain": round(gain[0], 4),
                   "optuna_improved": round(gain[1], 2), "tuned": gain[2]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"startup_cpu_s": startup, "rows": rows}, indent=2))
    summary(rows)


def summary(rows: list[dict]) -> None:
    print("\n| search | seed | structures | evaluations | eval CPU-s | model CPU-s | wall s | "
          "winner full | winner final | Optuna gain over defaults |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['search']} | {r['seed']} | {r['structures']} | {r['evaluations']} | {r['eval_cpu_s']} | "
              f"{r['model_cpu_s']} | {r['wall_s']:.0f} | {r['winner_full']:.4f} | "
              f"{r['winner_final'] if r['winner_final'] is None else round(r['winner_final'], 4)} | "
              f"{r['optuna_gain']:+.4f} ({r['optuna_improved']:.0%} of {r['tuned']}) |")
    by = {name: [r for r in rows if r["search"] == name] for name in ("staged", "full-only")}
    for key in ("eval_cpu_s", "model_cpu_s", "wall_s"):
        ratio = sum(r[key] for r in by["full-only"]) / max(1e-9, sum(r[key] for r in by["staged"]))
        print(f"full-only / staged, {key}: {ratio:.2f}x")
    for name, group in by.items():
        fulls = [r["winner_full"] for r in group]
        finals = [r["winner_final"] for r in group if r["winner_final"] is not None]
        print(f"{name}: winner full {statistics.mean(fulls):.4f} (sd {statistics.pstdev(fulls):.4f}), "
              f"final {statistics.mean(finals):.4f} (sd {statistics.pstdev(finals):.4f})")


if __name__ == "__main__":
    main()
