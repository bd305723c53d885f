"""Do checked lessons change the search? Evaluations to a fixed score with the Analyzer's claims
verified (`analyze.verify_share`, the default 0.1) and not (0), over several seeds, on the LLM
simulator: circle_packing with learn + analyze on, a fresh cognition base per run (the simulator's
lessons stay in the run's own base, where retrieval keeps refuted ones out and ranks confirmed ones
first). Per run: candidate evaluations until the best score first reaches --target (None: never
within the budget), the counterfactual evaluations spent, claims made and their verdicts, the
lessons written with each verdict, and the best score.

    python bench/verify_search.py --seeds 5 --evals 60 --target 2.0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.cognition.embeddings import make_embedder  # noqa: E402
from evoforge.cognition.store import CognitionBase  # noqa: E402
from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.config import CognitionConfig  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402

SHARES = {"verify off": 0.0, "verify on": 0.1}


def evals_to_target(nodes: list, target: float) -> int | None:
    """Candidate evaluations, in the order they finished, until the best score first reached `target`."""
    done = sorted((n for n in nodes if n.was_evaluated and n.origin != "seed"),
                  key=lambda n: n.evaluated_at or n.created_at)
    for count, node in enumerate(done, start=1):
        score = node.score_full if node.score_full is not None else node.score_pilot
        if score is not None and score >= target:
            return count
    return None


def one_run(sim: SimulatorProcess, name: str, seed: int, args: argparse.Namespace, root: Path) -> dict:
    label = f"{name.replace(' ', '-')}-{seed}"
    run_dir, config = root / label, root / f"{label}.yaml"
    config.write_text(json.dumps({"analyze": {"verify_share": SHARES[name]},
                                  "cognition": {"embedding": args.embedding}}))
    sim.reset(seed=seed)
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(root / f"ws-{label}"),
                 "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", str(args.evals),
                 "--seed", str(seed), "--quiet", "--no-mlflow"])
    status = json.loads((run_dir / "status.json").read_text())
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        nodes = store.all()
    own = CognitionBase(run_dir / "cognition", make_embedder(CognitionConfig(embedding=args.embedding)))
    lessons = Counter(item.verdict or "none" for item in own.list())
    claims = status.get("claims", {})
    return {"config": name, "seed": seed, "exit": code, "evaluations": status["evaluations"],
            "evals_to_target": evals_to_target(nodes, args.target),
            "verify_evals": status.get("verify_evals", 0),
            "claims": claims, "lessons_by_verdict": dict(lessons), "best": status["best_score"]}


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--evals", type=int, default=60)
    parser.add_argument("--target", type=float, default=2.0, help="the fixed score to reach")
    parser.add_argument("--median", type=float, default=0.2, help="the simulator's median latency (s)")
    parser.add_argument("--embedding", default="onnx", help="cognition.embedding for the runs")
    parser.add_argument("--out", type=Path, default=Path("bench/results/verify_search.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="evoforge-bench-verify-"))
    rows = []
    with SimulatorProcess(SimConfig(median_s=args.median, sigma=0.3, slots=8)) as sim:
        for seed in range(1, args.seeds + 1):
            for name in SHARES:
                row = one_run(sim, name, seed, args, root)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {key: str(value) for key, value in vars(args).items()}
    args.out.write_text(json.dumps({"args": settings, "rows": rows}, indent=2))
    print(f"| config | runs reaching {args.target} | median evals to it | mean best | claims made | checked "
          "| confirmed | refuted | counterfactual evals |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in SHARES:
        rs = [r for r in rows if r["config"] == name]
        reached = [r["evals_to_target"] for r in rs if r["evals_to_target"] is not None]
        median = statistics.median(reached) if reached else None
        sums = {k: sum(r["claims"].get(k, 0) for r in rs)
                for k in ("made", "checked", "confirmed", "refuted")}
        best = statistics.mean(r["best"] for r in rs)
        print(f"| {name} | {len(reached)}/{len(rs)} | {median} | {best:.4f} | "
              f"{sums['made']} | {sums['checked']} | {sums['confirmed']} | {sums['refuted']} | "
              f"{sum(r['verify_evals'] for r in rs)} |")


if __name__ == "__main__":
    main_bench()
