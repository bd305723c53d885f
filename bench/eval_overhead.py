"""Evaluation overhead inside a run: the recorded evaluation time minus the evaluator's own time.

Runs circle packing at the fast setting of `bench/profile_orchestrator.py` (LLM simulator, median
0.3 s, 8 LLM slots, 2 evaluation workers, async, default sinks) on a copy of the task whose
evaluator measures itself: `evaluate()` adds `self_s`, its own wall time, to its metrics. For each
evaluated candidate the overhead is `node.eval_s - self_s`: the sandbox's start (fork server,
loading the evaluator), the result's way back, and whatever delays the event loop adds before the
engine sees the child exit. `--alone` first times a few evaluations one at a time outside any run.

Each evaluation's step stamps (evaluators/eval_clock.py) are collected in-process, so the row
also splits the wall time from the start to the loop having the result (`wall_s`, what was
recorded as `eval_s` before the clock) into its steps, after `granted_to_start` (the slot
granted to the job started: the Prefect task run around it, not in any of these): `prepare`
(start to the task copy ready on the loop), `launch` (to the request sent to the fork server),
`child` (to the server reaping the child, less the evaluator's own time), `seen` (the loop's
delay in seeing the exit), and the recorded `eval_s` and `wait_s` (the loop waits taken out of it).

    python bench/eval_overhead.py --evals 150 --out bench/results/eval_overhead_after.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.evaluators import evaluation  # noqa: E402
from evoforge.evaluators.evaluation import evaluate_program  # noqa: E402
from evoforge.evaluators.task import load_task  # noqa: E402
from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402

SELF_TIMED = '''

import time as _time

_evaluate_untimed = evaluate


def evaluate(program_path):
    """The task's evaluation, with its own wall time as the metric self_s."""
    started = _time.perf_counter()
    metrics = _evaluate_untimed(program_path)
    metrics["self_s"] = _time.perf_counter() - started
    return metrics
'''


def timed_task(root: Path) -> Path:
    """A copy of circle_packing whose evaluator reports its own time."""
    source = load_task("circle_packing").root
    folder = root / "circle_packing_timed"
    shutil.copytree(source, folder)
    evaluator = folder / "evaluator.py"
    evaluator.write_text(evaluator.read_text() + SELF_TIMED)
    return folder


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50_ms": None, "p90_ms": None, "mean_ms": None}
    ordered = sorted(values)
    return {"n": len(ordered), "p50_ms": round(1000 * statistics.median(ordered), 2),
            "p90_ms": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 2),
            "mean_ms": round(1000 * statistics.fmean(ordered), 2)}


STAMPS: list[dict[str, float]] = []


def _collecting(timed: Any) -> Any:
    """`evaluation._timed`, also keeping each outcome's stamps and self_s (in this process)."""

    def wrapper(outcome: Any, result: Any, clock: Any) -> Any:
        out = timed(outcome, result, clock)
        STAMPS.append({**out.stamps, "eval_s": out.seconds, "wait_s": out.wait_s,
                       "self_s": out.metrics.get("self_s", float("nan"))})
        return out

    return wrapper


def steps(rows: list[dict[str, float]]) -> dict[str, Any]:
    """The stamps of warm evaluations, split into the steps named in the module doc."""
    rows = [r for r in rows if "exited" in r and "launched" in r and r["self_s"] == r["self_s"]]
    parts: dict[str, list[float]] = {"granted_to_start": [], "wall_s": [], "prepare": [], "launch": [],
                                     "child_minus_self": [], "pid_seen": [], "seen": [],
                                     "loop_wait_before_launch": [],
                                     "wall_minus_self": [], "recorded_minus_self": [], "wait_s": []}
    for r in rows:
        if "granted" in r:
            parts["granted_to_start"].append(r["start"] - r["granted"])
        parts["wall_s"].append(r["seen"] - r["start"])
        parts["prepare"].append(r.get("prepared", r["start"]) - r["start"])
        parts["launch"].append(r["launched"] - r.get("prepared", r["start"]))
        parts["child_minus_self"].append(r["exited"] - r["launched"] - r["self_s"])
        parts["pid_seen"].append(r.get("pid_seen", r["launched"]) - r["launched"])
        parts["seen"].append(r["seen"] - r["exited"])
        parts["loop_wait_before_launch"].append(r["loop_wait"])
        parts["wall_minus_self"].append(r["seen"] - r["start"] - r["self_s"])
        parts["recorded_minus_self"].append(r["eval_s"] - r["self_s"])
        parts["wait_s"].append(r["wait_s"])
    return {name: _stats(values) for name, values in parts.items()}


def alone(task_dir: Path, count: int) -> dict[str, Any]:
    """`count` evaluations of the initial program, one at a time, no run around them."""
    task = load_task(str(task_dir))

    async def one() -> tuple[float, float]:
        outcome = await evaluate_program(task, task.initial_code)
        return outcome.seconds, outcome.metrics.get("self_s", float("nan"))

    rows = [asyncio.run(one()) for _ in range(count)]
    return {"eval_s": _stats([r[0] for r in rows]), "self_s": _stats([r[1] for r in rows]),
            "overhead": _stats([r[0] - r[1] for r in rows])}


def in_run(task_dir: Path, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A default async run at the fast setting; per-candidate recorded vs own evaluation time."""
    with SimulatorProcess(SimConfig(median_s=args.median, sigma=args.sigma, slots=args.slots)) as sim:
        sim.reset(seed=args.seed)
        code = main(["run", str(task_dir), "--run-dir", str(root / "run"), "--workspace", str(root / "ws"),
                     "--llm-base-url", sim.base_url, "--max-evals", str(args.evals), "--mode", "async",
                     "--workers", f"research={args.slots},engineer={args.engineers}",
                     "--seed", str(args.seed), "--quiet", *([] if args.mlflow else ["--no-mlflow"])])
    with NodeStore(root / "run" / "nodes.duckdb", read_only=True) as store:
        nodes = [n for n in store.all() if n.was_evaluated and "self_s" in n.metrics]
    recorded = [n.eval_s for n in nodes]
    own = [n.metrics["self_s"] for n in nodes]
    return {"exit": code, "eval_s": _stats(recorded), "self_s": _stats(own),
            "overhead": _stats([r - o for r, o in zip(recorded, own, strict=True)]),
            "steps": steps(STAMPS)}


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--median", type=float, default=0.3)
    parser.add_argument("--sigma", type=float, default=0.6)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--engineers", type=int, default=2)
    parser.add_argument("--evals", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alone", type=int, default=10, help="evaluations timed alone first (0: none)")
    parser.add_argument("--no-mlflow", dest="mlflow", action="store_false")
    parser.add_argument("--label", default="", help="a note stored with the row (e.g. before/after)")
    parser.add_argument("--out", type=Path, default=None, help="write the row as JSON here")
    args = parser.parse_args()
    evaluation._timed = _collecting(evaluation._timed)  # type: ignore[attr-defined]
    root = Path(tempfile.mkdtemp(prefix="evoforge-eval-overhead-"))
    task_dir = timed_task(root)
    row: dict[str, Any] = {"bench": "eval_overhead", "label": args.label, "evals": args.evals,
                           "loadavg_before": os.getloadavg(),
                           "setting": {"median_s": args.median, "sigma": args.sigma, "slots": args.slots,
                                       "engineers": args.engineers, "mlflow": args.mlflow}}
    if args.alone:
        row["alone"] = alone(task_dir, args.alone)
    STAMPS.clear()
    row["in_run"] = in_run(task_dir, root, args)
    row["loadavg_after"] = os.getloadavg()
    text = json.dumps(row, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    overhead = row["in_run"]["overhead"]["p50_ms"]
    print(f"evaluation overhead in a run: p50 {overhead} ms", file=sys.stderr)


if __name__ == "__main__":
    main_bench()
