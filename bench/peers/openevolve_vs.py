"""OpenEvolve 0.4.0 against `evoforge run circle_packing` on one model, for the same number of LLM calls.

Both evolve circle_packing (a copy whose evaluator can burn `--burn-cpu-s` CPU seconds first:
bench/peers/circle_task.py) with the same server through a counting lane (bench/peers/proxy.py).
OpenEvolve runs through its Python API (`openevolve.run_evolution`) with `--iterations` iterations
(one LLM call each) and `--oe-workers` parallel evaluations (process workers, 8 by default);
evoforge runs with `budget.max_proposals` set to the same count, analysis and cognition off so
that every LLM call is a proposal. For each: LLM calls, usable proposals (applied, evaluated,
valid), evaluations, best score, wall time and evaluations per minute. Run it with
/tmp/peersvenv's Python (see README.md)::

    /tmp/peersvenv/bin/python bench/peers/openevolve_vs.py --base-url http://127.0.0.1:18431/v1 \\
        --model SmolLM2-135M-Instruct.Q4_1 --calls 20
    /tmp/peersvenv/bin/python bench/peers/openevolve_vs.py --sim --calls 40 --burn-cpu-s 1
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from circle_task import make_task
from common import (
    RESULTS,
    add_server_args,
    check_server_args,
    evoforge_env,
    llm_server,
    machine,
    require,
    write,
)
from oe_sim import openevolve_to_sim
from proxy import Lane, Lanes

SYSTEMS = ("openevolve", "evoforge")


def run_openevolve(args: argparse.Namespace, lane_url: str, model: str, root: Path) -> dict[str, Any]:
    """openevolve.run_evolution on the wrapped task, configured as a user would in config.yaml."""
    import yaml
    from openevolve import run_evolution

    log = root / "evaluations.jsonl"
    task = make_task(root / "task", args.burn_cpu_s, log, errors_as_metrics=True)
    # OpenEvolve sends random_seed as every LLM request's `seed`: on a server that honours it, the
    # same prompt gets the same answer; --oe-unseeded leaves it out
    config = {"max_iterations": args.calls, "checkpoint_interval": 1000,
              "random_seed": None if args.oe_unseeded else args.seed,
              "log_dir": str(root / "logs"),
              "llm": {"api_base": lane_url, "api_key": "unused", "models": [{"name": model, "weight": 1.0}],
                      "temperature": args.temperature, "max_tokens": args.max_tokens,
                      "timeout": args.timeout_s, "retries": 0},
              "evaluator": {"parallel_evaluations": args.oe_workers, "cascade_evaluation": False,
                            "timeout": 60 + int(args.burn_cpu_s * 4)}}
    config_file = root / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    result = run_evolution(str(task / "initial_program.py"), str(task / "evaluator.py"),
                           config=str(config_file), iterations=args.calls, output_dir=str(root / "out"),
                           cleanup=False)
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    children = rows[1:]  # the first evaluation is the initial program's
    return {"best_score": result.best_score, "seed_score": rows[0]["score"] if rows else None,
            "evaluations": len(children), "usable_proposals": sum(1 for r in children if r["error"] is None),
            "invalid_programs": sum(1 for r in children if r["error"] is not None),
            "eval_s_sum": round(sum(r["end"] - r["start"] for r in rows), 1)}


def run_evoforge(args: argparse.Namespace, lane_url: str, model: str, root: Path) -> dict[str, Any]:
    """`evoforge run` on the wrapped task: the asi-evolve algorithm, `calls` proposals at most."""
    task = make_task(root / "task", args.burn_cpu_s, None, errors_as_metrics=False)
    config = {"cognition": {"enabled": False}, "analyze": {"enabled": False},
              "budget": {"max_proposals": args.calls},
              "llm": {"max_tokens": args.max_tokens, "temperature": args.temperature,
                      "timeout_s": args.timeout_s, "max_retries": 0}}
    config_file = root / "config.json"
    config_file.write_text(json.dumps(config))
    command = ["evoforge", "run", str(task), "--run-dir", str(root / "run"), "--workspace", str(root / "ws"),
               "--config", str(config_file), "--llm-base-url", lane_url, "--llm-model", model,
               "--max-evals", str(args.calls + 1), "--seed", str(args.seed), "--quiet", "--no-mlflow"]
    if args.evoforge_workers:
        command += ["--workers", args.evoforge_workers]
    done = subprocess.run(command, env=evoforge_env(), capture_output=True, text=True)
    (root / "evoforge.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"evoforge run exited {done.returncode}: {(done.stderr or done.stdout)[-400:]}")
    status = json.loads((root / "run" / "status.json").read_text())
    from evoforge.infra.nodestore import NodeStore

    with NodeStore(root / "run" / "nodes.duckdb", read_only=True) as store:
        nodes = store.all()
    children = [n for n in nodes if n.origin != "seed"]
    evaluated = [n for n in children if n.evaluated_at is not None]
    seed = next((n for n in nodes if n.origin == "seed"), None)
    return {"best_score": status["best_score"], "seed_score": seed.score_full if seed else None,
            "proposals": status["proposals"], "evaluations": len(evaluated),
            "usable_proposals": sum(1 for n in evaluated if n.score_full is not None and n.error is None),
            "invalid_programs": sum(1 for n in evaluated if n.score_full is None or n.error is not None),
            "not_evaluated_by_reason": dict(collections.Counter(
                n.reason or n.status.value for n in children if n.evaluated_at is None)),
            "eval_s_sum": round(sum(n.eval_s for n in nodes), 1),
            "run_wall_s": round(status["wall_s"], 1)}  # evoforge's own clock: without process start-up


RUNNERS = {"openevolve": run_openevolve, "evoforge": run_evoforge}


def one_system(name: str, args: argparse.Namespace, lane: Lane, model: str, root: Path) -> dict[str, Any]:
    """Run one system on its own lane; read its calls, tokens and wall time."""
    (root / name).mkdir()
    start = time.perf_counter()
    row: dict[str, Any] = {"system": name, **RUNNERS[name](args, lane.base_url, model, root / name)}
    wall = time.perf_counter() - start
    row["wall_s"] = round(wall, 1)
    row["llm"] = lane.counts()
    row["evaluations_per_min"] = round(row["evaluations"] / (wall / 60), 2)
    if "run_wall_s" in row:
        row["evaluations_per_min_run_clock"] = round(row["evaluations"] / (row["run_wall_s"] / 60), 2)
    row["usable_per_llm_call"] = round(row["usable_proposals"] / max(row["llm"]["calls"], 1), 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(parser)
    parser.add_argument("--calls", type=int, default=20,
                        help="LLM calls (OpenEvolve iterations, evoforge proposals)")
    parser.add_argument("--burn-cpu-s", type=float, default=0.0,
                        help="CPU seconds each evaluation burns first")
    parser.add_argument("--oe-workers", type=int, default=8,
                        help="OpenEvolve evaluator.parallel_evaluations")
    parser.add_argument("--oe-unseeded", action="store_true",
                        help="OpenEvolve random_seed: null (no `seed` in its LLM requests)")
    parser.add_argument("--evoforge-workers", default="",
                        help="evoforge --workers, e.g. research=8,engineer=2")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--timeout-s", type=int, default=600,
                        help="per LLM call (requests queue on one server)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "peers_openevolve.json")
    args = parser.parse_args()
    check_server_args(parser, args)
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    require(parser, ["openevolve"] if "openevolve" in systems else [])
    rows = []
    # on the simulator, OpenEvolve's prompts are rewritten so that it answers them with edits (oe_sim.py)
    rewrite = openevolve_to_sim if args.sim else None
    with llm_server(args) as (base_url, model), Lanes(base_url, ["evoforge"]) as lanes, \
            Lanes(base_url, ["openevolve"], rewrite) as oe_lanes, \
            tempfile.TemporaryDirectory(prefix="peers-oe-") as tmp:
        lane_of = {"evoforge": lanes["evoforge"], "openevolve": oe_lanes["openevolve"]}
        for name in systems:
            rows.append(one_system(name, args, lane_of[name], model, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    write(args.out, {"benchmark": "openevolve_vs", "task": "circle_packing", "model": model,
                     "server": "simulator" if args.sim else "real", "llm_calls": args.calls,
                     "burn_cpu_s": args.burn_cpu_s, "openevolve_workers": args.oe_workers,
                     "openevolve_random_seed": None if args.oe_unseeded else args.seed,
                     "evoforge_workers": args.evoforge_workers or "defaults (research=8, engineer=2)",
                     "max_tokens": args.max_tokens, "temperature": args.temperature,
                     "machine": machine(), "systems": rows})


if __name__ == "__main__":
    main()
