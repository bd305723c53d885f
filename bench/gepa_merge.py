"""GEPA with and without its merge of two Pareto-front members (`gepa.merge_every`).

Runs built-in `house_style --algorithm gepa` (the seed prompt scores 0.25 on val) on the LLM
simulator (the proposer and the task model, lognormal latency of `--median` seconds) with
`gepa.merge_every` 0 (off) and each of `--every`, MLflow off, and reads each run's status.json and
node database: the best val score, the evaluations until val reached `--target` (else until the
run's best), the merges made (nodes with `merge` data), how many passed the gate, how many
validated above both the candidates they merged, the held-out test score of the search's winner,
and the tokens (proposer and task model, the final test pass included) per evaluation.

    python bench/gepa_merge.py --evals 20 --seeds 3 --every 3,5
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from task_model_run import Run, finish, mean, reached, run_grid, run_task  # noqa: E402

from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.nodes import Status  # noqa: E402
from evoforge.stages.gate import GateData  # noqa: E402
from evoforge.stages.merge import MergeData  # noqa: E402
from evoforge.stages.population.repeat_data import RepeatData  # noqa: E402


def merge_figures(run: Run, every: int) -> dict:
    """Merges made, passed the gate, validated, validated above both merged candidates, repeats."""
    nodes = run.by_id()
    merges = [n for n in run.nodes if MergeData.peek(n).ours]
    passed = [n for n in merges if GateData.peek(n).score is not None and n.failed_stage != "gate"]
    validated = [n for n in merges if n.status == Status.EVALUATED and n.score_full is not None]
    above = 0
    for node in validated:
        data = MergeData.peek(node)
        parents = [nodes[i].score_full for i in (data.ours, data.theirs)]
        above += all(p is not None and node.score_full > p for p in parents)
    return {"merges": len(merges), "merges_gate_passed": len(passed), "merges_validated": len(validated),
            "merges_above_both": above,
            "merges_repeats": sum(1 for n in merges if RepeatData.peek(n).repeat_of),
            "merge_turns_approx": run.status["proposals"] // every if every else 0}


def one_run(every: int, seed: int, args: argparse.Namespace, root: Path, sim: SimulatorProcess) -> dict:
    config = {"gepa": {"merge_every": every}}
    run = run_task("house_style", "gepa", config, seed, args.evals, root / f"merge{every}-{seed}",
                   root / "ws", sim)
    best = run.status["best_score"]
    return {"merge_every": every, "seed": seed, **run.common(), "evals_to_target": run.evals_to(args.target),
            "evals_to_best": run.evals_to(best) if best is not None else None, **merge_figures(run, every),
            "stop_reason": run.status["stop_reason"]}


COLUMNS = (  # (heading, row key, format) of the means over the seeds
    ("best val", "best_val", ".3f"), ("evals to best", "evals_to_best", ".1f"), ("merges", "merges", ".1f"),
    ("passed gate", "merges_gate_passed", ".1f"), ("above both parents", "merges_above_both", ".1f"),
    ("test (winner)", "test_winner", ".3f"), ("tokens/eval", "tokens_per_eval", ",.0f"),
    ("search tokens/eval", "search_tokens_per_eval", ",.0f"), ("wall s", "wall_s", ".1f"))


def summary(rows: list[dict], target: float) -> str:
    head = ["merge_every", f"evals to {target}", *(c[0] for c in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for every in sorted({r["merge_every"] for r in rows}):
        mine = [r for r in rows if r["merge_every"] == every]
        cells = [str(every), reached([r["evals_to_target"] for r in mine]),
                 *(mean([r.get(key) for r in mine], spec) for _, key, spec in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--median", type=float, default=0.05, help="simulator latency median (s)")
    parser.add_argument("--evals", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--every", default="3,5", help="merge_every values to compare with 0")
    parser.add_argument("--target", type=float, default=1.0, help="the val score to reach")
    parser.add_argument("--json", type=Path, default=Path("bench/out/gepa_merge.json"))
    args = parser.parse_args()
    rows = run_grid("evoforge-merge-", args.median, args.seeds, [0, *(int(e) for e in args.every.split(","))],
                    lambda every, seed, root, sim: one_run(every, seed, args, root, sim))
    finish(rows, summary(rows, args.target), args.json)


if __name__ == "__main__":
    main_bench()
