"""Four algorithms on one playbook task: asi-evolve, gepa, ACE offline and ACE online (and ACE
offline at online's batch of 1, to tell the stream from the batch size).

Runs built-in `unit_playbook` (the seed playbook scores 0.125 on val) on the LLM simulator (the
proposer and the task model, lognormal latency of `--median` seconds), each algorithm at its own
defaults, MLflow off, and reads each run's status.json and node database: the best val score,
the evaluations (the seed's is the first) until val reached `--threshold`, the held-out test
score of the search's winner, the tokens (proposer and task model, the final test pass included)
per evaluation, and for ACE the generator's steps, the share of curated playbooks rebased onto a
newer one, and the online score.

    python bench/playbook_algorithms.py --evals 20 --seeds 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from task_model_run import finish, mean, reached, run_grid, run_task  # noqa: E402

from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.stages.curator import CuratorData  # noqa: E402

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {  # name -> (algorithm, config)
    "asi-evolve": ("asi-evolve", {}),
    "gepa": ("gepa", {}),
    "ace-offline": ("ace", {"ace": {"mode": "offline", "batch": 2}}),
    "ace-online": ("ace", {"ace": {"mode": "online", "batch": 1}}),
    "ace-offline-b1": ("ace", {"ace": {"mode": "offline", "batch": 1}}),  # online's batch, offline's stream
}


def one_run(name: str, seed: int, args: argparse.Namespace, root: Path, sim: SimulatorProcess) -> dict:
    algorithm, config = CONFIGS[name]
    run = run_task("unit_playbook", algorithm, config, seed, args.evals, root / f"{name}-{seed}",
                   root / "ws", sim)
    row = {"config": name, "seed": seed, **run.common(), "evals_to_threshold": run.evals_to(args.threshold)}
    if algorithm == "ace":
        stream = run.status["sinks"]["ace-stream"]
        curated = [CuratorData.peek(n) for n in run.nodes if "curator" in n.owned]
        rebased = sum(1 for d in curated if d.rebased_from)
        row.update({"steps": stream["steps"], "laps": stream["laps"], "online_score": stream["online_score"],
                    "curated": len(curated), "rebased": rebased,
                    "rebased_share": round(rebased / len(curated), 3) if curated else None})
    return row


COLUMNS = (  # (heading, row key, format) of the means over the seeds
    ("best val", "best_val", ".3f"), ("test (winner)", "test_winner", ".3f"),
    ("tokens/eval", "tokens_per_eval", ",.0f"), ("search tokens/eval", "search_tokens_per_eval", ",.0f"),
    ("wall s", "wall_s", ".1f"), ("ACE steps", "steps", ".1f"), ("rebased share", "rebased_share", ".2f"),
    ("online score", "online_score", ".3f"))


def summary(rows: list[dict], threshold: float) -> str:
    head = ["config", f"evals to >= {threshold}", *(c[0] for c in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for name in CONFIGS:
        mine = [r for r in rows if r["config"] == name]
        if mine:
            cells = [name, reached([r["evals_to_threshold"] for r in mine]),
                     *(mean([r.get(key) for r in mine], spec) for _, key, spec in COLUMNS)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--median", type=float, default=0.05, help="simulator latency median (s)")
    parser.add_argument("--evals", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=0.5, help="the val score to reach")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--json", type=Path, default=Path("bench/out/playbook_algorithms.json"))
    args = parser.parse_args()
    rows = run_grid("evoforge-playbook-", args.median, args.seeds, args.configs.split(","),
                    lambda name, seed, root, sim: one_run(name, seed, args, root, sim))
    finish(rows, summary(rows, args.threshold), args.json)


if __name__ == "__main__":
    main_bench()
