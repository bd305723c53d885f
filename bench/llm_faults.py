"""Issue 11 benchmark: LLM faults injected by the simulator, and what evoforge did with them.

Short circle_packing runs over `evoforge llm-sim`: one per fault kind (a share `--rate` of the
requests fails that way), one with every kind mixed, one with an outage window (down after
`--down-after` requests for `--down-for` s), and one with a permanent outage (the run gives up
after `llm.circuit.give_up_s`, then the same command resumes it once the server is back).
Analysis, repair and the cognition base are off, so every chat request is a research call and
every answer fault shows on exactly one node.

    python bench/llm_faults.py [--evals 20] [--rate 0.3]

Prints one row per run: the faults injected (the simulator's counts), how they ended (retried
away, or recorded on a failed node with the reason), evaluations completed / budget, breaker
pauses and paused seconds, exit code, and the nodes failed because the server was down.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))

from evoforge.flows.cli import main  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import ERROR_KINDS, SimConfig  # noqa: E402
from evoforge.infra.nodes import FAILED, Node  # noqa: E402
from evoforge.infra.nodestore import NodeStore  # noqa: E402
from evoforge.infra.runfiles import read_json  # noqa: E402

CONFIG = """\
llm:
  timeout_s: 1
  max_retries: 4
  backoff_s: 0.05
  max_answer_chars: 200000
  circuit: {failures: 5, probe_s: 0.25, give_up_s: %(give_up)s}
analyze: {enabled: false}
guard: {repair_attempts: 0}
cognition: {enabled: false}
"""
# what a failed node's reason says, by fault: answer faults are recorded, outages must not be
REASONS = (("truncated", "cut off at max_tokens"), ("bad_json", "not a chat completion"),
           ("huge", "over llm.max_answer_chars"), ("unusable", "unusable answer"))
RETRIED = ("429", "500", "hang", "down")  # faults of the server, not of the answer: retried
OUTAGE_WORDS = ("HTTP 429", "HTTP 500", "HTTP 503", "llm.timeout_s", "failed after")


def _nodes(run_dir: Path) -> list[Node]:
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        return store.all()


def _run(sim: SimulatorProcess, run_dir: Path, evals: int, give_up_s: float) -> tuple[int, str]:
    config = run_dir.with_suffix(".yaml")
    config.write_text(CONFIG % {"give_up": give_up_s})
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace",
                     str(run_dir.parent / "ws"), "--max-evals", str(evals), "--seed", "3", "--quiet",
                     "--no-mlflow", "--no-prefect-tasks", "--llm-base-url", sim.base_url,
                     "--config", str(config)])
    last = next((ln for ln in err.getvalue().splitlines() if ln.startswith("evoforge: error:")), "")
    return code, last


def _row(name: str, sim_cfg: SimConfig, root: Path, evals: int, give_up_s: float = 60.0,
         resume: bool = False) -> dict:
    run_dir = root / name
    started = time.monotonic()
    codes, pauses, paused_s, message = [], 0, 0.0, ""
    with SimulatorProcess(sim_cfg) as sim:
        for session in range(2 if resume else 1):
            if session:
                sim.outage(0)  # the server is back: the same command resumes the run
            code, last = _run(sim, run_dir, evals, give_up_s)
            status = read_json(run_dir / "status.json") or {}
            codes.append(code)
            message = message or last  # the first session's give-up line
            pauses += status.get("llm_pauses", 0)  # status.json counts one session's
            paused_s += status.get("llm_paused_s", 0.0)
        injected = Counter({k: v for k, v in sim.stats()["errors"].items() if k != "client_disconnect"})
    failed = [n for n in _nodes(run_dir) if n.status == FAILED and n.failed_stage == "research"]
    recorded = Counter(kind for n in failed for kind, words in REASONS if words in (n.error or ""))
    outage_failed = sum(any(w in (n.error or "") for w in OUTAGE_WORDS) for n in failed)
    retried = sum(v for k, v in injected.items() if k in RETRIED) - outage_failed
    return {"run": name, "injected": injected, "recorded": recorded, "retried": retried,
            "outage_failed": outage_failed, "evaluations": status.get("evaluations", 0), "budget": evals,
            "pauses": pauses, "paused_s": paused_s, "codes": codes, "message": message,
            "wall_s": time.monotonic() - started}


def _fmt(counts: Counter) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items())) or "-"


def main_bench(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=20, help="evaluations per run")
    parser.add_argument("--rate", type=float, default=0.3, help="share of requests failing, per kind")
    parser.add_argument("--down-after", type=int, default=10, help="outage run: requests before it")
    parser.add_argument("--down-for", type=float, default=3.0, help="outage run: its seconds")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="evoforge-llm-faults-"))
    base = {"median_s": 0.02, "sigma": 0.3, "slots": 4, "hang_s": 60.0}
    rows = [_row(kind, SimConfig(**base, seed=7, error_rate=args.rate, error_kinds=(kind,)), root, args.evals)
            for kind in ERROR_KINDS]
    rows.append(_row("mixed", SimConfig(**base, seed=29, error_rate=0.5, error_kinds=ERROR_KINDS),
                     root, args.evals))
    rows.append(_row("outage-window", SimConfig(**base, seed=5, down_after=args.down_after,
                                                down_for=args.down_for), root, args.evals))
    rows.append(_row("outage-permanent", SimConfig(**base, seed=5, down_after=args.down_after,
                                                   down_for=math.inf), root, args.evals,
                     give_up_s=3.0, resume=True))
    head = (f"{'run':<17} {'faults injected (simulator)':<64} {'retried ok':>10}  "
            f"{'recorded on failed nodes':<42} {'outage-failed':>13} {'evals':>7} {'pauses':>6} "
            f"{'paused s':>8} {'exit':>6} {'wall s':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        codes = "->".join(str(c) for c in r["codes"])
        print(f"{r['run']:<17} {_fmt(r['injected']):<64} {r['retried']:>10}  {_fmt(r['recorded']):<42} "
              f"{r['outage_failed']:>13} {r['evaluations']:>3}/{r['budget']:<3} {r['pauses']:>6} "
              f"{r['paused_s']:>8.1f} {codes:>6} {r['wall_s']:>7.1f}")
    total = sum(sum(r["injected"].values()) for r in rows)
    complete = sum(r["evaluations"] == r["budget"] for r in rows)
    print(f"\n{total} faults injected over {len(rows)} runs; {complete}/{len(rows)} runs completed their "
          f"budget; {sum(r['outage_failed'] for r in rows)} nodes failed because the server was down")
    for r in rows:
        if r["message"]:
            print(f"{r['run']}: {r['message']}")
    return 0


if __name__ == "__main__":
    sys.exit(main_bench())
