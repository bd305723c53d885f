"""The LLM-bound setting with the Analyzer on: do the LLM scheduler and the value-ranked analyses
keep candidates/min near the LLM's bound, and is every new best still analysed by the LLM?

Runs circle_packing on evoforge's LLM simulator at the slow setting (median 2.0 s, sigma 0.6,
8 slots; the evaluation is cheap), `--workers research=8,engineer=2` (`--research`: more
research workers than the endpoint's slots), `scheduler.slots` the simulator's 8, everything
else at its defaults (analysis, the cognition base, MLflow, Prefect task runs on). Prints and writes (JSON,
`--out`, default bench/results/llm_bound.json): candidates/min (the run's, status.json's, whose
wall time includes the start-up; from the seed's evaluation on; and the steady state after the
first 10% of the evaluations), LLM calls/min (the simulator's count), analyses written
by the LLM and by the deterministic summary (status.json's `analysed_llm`/`analysed_summary`), the
new bests and how many of them the LLM analysed. `--baseline` also runs the old behaviour
(scheduler off, every candidate analysed by the LLM) for comparison.

    python bench/llm_bound.py --evals 300
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
from evoforge.infra.nodes import EVALUATED, Node  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402
from evoforge.stages.analysis_data import BY_LLM, AnalysisData  # noqa: E402

SETTINGS = {
    "scheduler + value-ranked analysis (default)": {},
    "baseline: no scheduler, every candidate analysed": {"scheduler": {"enabled": False},
                                                         "analyze": {"by_value": False}},
}


def new_bests(nodes: list[Node], maximize: bool) -> list[Node]:
    """The evaluated candidates that beat every earlier one (in evaluation order), the seed apart."""
    best: float | None = None
    found = []
    for node in sorted((n for n in nodes if n.status == EVALUATED and n.score_full is not None),
                       key=lambda n: n.evaluated_at or 0.0):
        value = node.score_full if maximize else -node.score_full  # type: ignore[operator]
        if best is None or value > best:
            if best is not None:
                found.append(node)
            best = value
    return found


def steady_per_min(nodes: list[Node]) -> float | None:
    """Evaluations per minute after the first 10% (ramp-up: the seed, the first LLM answers)."""
    done = sorted(n.evaluated_at for n in nodes if n.evaluated_at is not None)
    skip = max(2, len(done) // 10)
    if len(done) - skip < 3 or done[-1] <= done[skip]:
        return None
    return (len(done) - 1 - skip) / (done[-1] - done[skip]) * 60


def after_start_per_min(run_dir: Path) -> float | None:
    """Evaluations per minute from the seed's evaluation on (the start-up before it, Prefect's flow
    and the cognition base opening, is the same with or without analysis)."""
    lines = (run_dir / "timeline.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    first = next((r for r in rows if r.get("evaluations", 0) >= 1), None)
    last = rows[-1] if rows else None
    if first is None or last is None or last["wall_s"] <= first["wall_s"]:
        return None
    return 60 * (last["evaluations"] - first["evaluations"]) / (last["wall_s"] - first["wall_s"])


def one_run(sim: SimulatorProcess, name: str, overrides: dict, args: argparse.Namespace, root: Path) -> dict:
    run_dir = root / f"run-{len(list(root.iterdir()))}"
    config = root / f"{run_dir.name}.yaml"
    if overrides.get("scheduler", {}).get("enabled", True):  # the endpoint's concurrency: the simulator's
        overrides = {**overrides, "scheduler": {**overrides.get("scheduler", {}), "slots": args.slots}}
    config.write_text(json.dumps(overrides))  # JSON is YAML
    sim.reset(seed=args.seed)
    before = sim.stats()
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(root / "ws"),
                 "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", str(args.evals),
                 "--workers", f"research={args.research or args.slots},engineer=2", "--seed", str(args.seed),
                 "--quiet"])
    after = sim.stats()
    status = json.loads((run_dir / "status.json").read_text())
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        nodes = store.all()
    bests = new_bests(nodes, maximize=True)  # circle_packing maximizes
    calls = after["completed"] - before["completed"]
    minutes = status["wall_s"] / 60
    return {
        "setting": name, "research_workers": args.research or args.slots, "exit": code,
        "evaluations": status["evaluations"], "wall_s": status["wall_s"],
        "candidates_per_min": status["candidates_per_min"],
        "after_start_candidates_per_min": after_start_per_min(run_dir),
        "steady_candidates_per_min": steady_per_min(nodes),
        "llm_calls": calls, "llm_calls_per_min": calls / minutes if minutes else None,
        "llm_calls_per_candidate": calls / max(1, status["evaluations"]),
        "slot_utilisation": (after["busy_slot_seconds"] - before["busy_slot_seconds"])
        / (args.slots * status["wall_s"]),
        "analysed_llm": status.get("analysed_llm"), "analysed_summary": status.get("analysed_summary"),
        "new_bests": len(bests),
        "new_bests_analysed_by_llm": sum(AnalysisData.peek(n).by == BY_LLM for n in bests),
        "every_new_best_analysed": all(AnalysisData.peek(n).by == BY_LLM for n in bests),
        "best": status["best_score"],
    }


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--median", type=float, default=2.0)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--evals", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--research", type=int, default=None,
                        help="research workers (default: --slots); the scheduler keeps --slots calls at once")
    parser.add_argument("--baseline", action="store_true", help="also run the old behaviour")
    parser.add_argument("--out", type=Path, default=Path("bench/results/llm_bound.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evoforge-bench-llmbound-"))
    main(["run", "circle_packing", "--run-dir", str(root / "warmup"), "--workspace", str(root / "ws"),
          "--max-evals", "2", "--quiet"])  # Prefect's server, the embedder, MLflow's database: untimed
    rows = []
    names = list(SETTINGS) if args.baseline else list(SETTINGS)[:1]
    with SimulatorProcess(SimConfig(median_s=args.median, sigma=0.6, slots=args.slots)) as sim:
        for name in names:
            rows.append(one_run(sim, name, SETTINGS[name], args, root))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"median_s": args.median, "slots": args.slots, "evals": args.evals,
                                    "seed": args.seed, "rows": rows}, indent=2) + "\n")
    keys = ["candidates_per_min", "after_start_candidates_per_min", "steady_candidates_per_min",
            "llm_calls_per_min", "llm_calls_per_candidate",
            "slot_utilisation", "analysed_llm", "analysed_summary", "new_bests", "new_bests_analysed_by_llm",
            "every_new_best_analysed"]
    print("| setting | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for row in rows:
        print(f"| {row['setting']} | " + " | ".join(_cell(row[k]) for k in keys) + " |")


def _cell(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    main_bench()
