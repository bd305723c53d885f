"""The sandbox's per-evaluation overhead as root (dedicated uid) and as an ordinary user (user namespaces).

For each isolation kind the wall time of ``evaluate_program`` (circle_packing's seed, one after
another) minus the evaluator's own time (the median of ``evaluate(program)`` called in-process),
p50 and p90, warm (forked from the fork server) and cold (a fresh Python), and the same with
``sandbox.isolate: false`` as the floor. The first evaluation of each mode (the fork server's
start) is left out. Run as root, it measures root's kinds in this process, then runs itself as
the ordinary user ``evoforge-test`` (tests/unprivileged.py creates it) for ``userns``; run as an
ordinary user, it measures what that user gets. Usage::

    python bench/sandbox_unprivileged.py --reps 40     # prints a table, writes bench/out/...json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.near_limit import _own_times, _pct, _sandbox_times  # noqa: E402
from evoforge.evaluators.isolation import availability  # noqa: E402
from evoforge.evaluators.sandbox import SandboxLimits  # noqa: E402
from evoforge.evaluators.task import load_task  # noqa: E402

OUT = ROOT / "bench" / "out" / "sandbox_unprivileged.json"


def measure(reps: int) -> list[dict]:
    """Overhead rows of this process's user: its isolation kind and isolation off, warm and cold."""
    task = load_task("circle_packing")
    own = statistics.median(_own_times(task, 50))
    rows = []
    for isolate in (True, False):
        for warm in (True, False):
            limits = replace(SandboxLimits(timeout_s=60), isolate=isolate, warm=warm)
            walls = asyncio.run(_sandbox_times(task, limits, reps + 1))
            over = [(w - own) * 1000 for w in walls[1:]]
            rows.append({"user": "root" if os.geteuid() == 0 else "ordinary",
                         "isolation": availability().kind if isolate else "off",
                         "mode": "warm" if warm else "cold", "evaluations": reps,
                         "own_ms": round(own * 1000, 2), "overhead_p50_ms": round(_pct(over, 0.5), 1),
                         "overhead_p90_ms": round(_pct(over, 0.9), 1)})
    return rows


def as_user(reps: int) -> list[dict]:
    """This script's rows measured as the ordinary test user (from root)."""
    from tests.unprivileged import ensure_user, make_home, run_as_user

    home = make_home(ensure_user())
    try:
        done = run_as_user([sys.executable, str(Path(__file__).resolve()), "--reps", str(reps), "--rows"],
                           home, timeout=3600)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"the ordinary user's measurement failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=40, help="evaluations per mode (default 40)")
    parser.add_argument("--rows", action="store_true", help="print this user's rows as JSON only")
    args = parser.parse_args()
    if args.reps < 2:
        print("--reps: at least 2", file=sys.stderr)
        raise SystemExit(2)
    rows = measure(args.reps)
    if args.rows:
        print(json.dumps(rows))
        return
    if os.geteuid() == 0:
        rows += as_user(args.reps)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(rows, indent=1))
    print(f"{'user':9} {'isolation':9} {'mode':5} {'p50 ms':>7} {'p90 ms':>7}  (evaluator own "
          f"{rows[0]['own_ms']} ms, {args.reps} evaluations each)")
    for row in rows:
        print(f"{row['user']:9} {row['isolation']:9} {row['mode']:5} {row['overhead_p50_ms']:7.1f} "
              f"{row['overhead_p90_ms']:7.1f}")


if __name__ == "__main__":
    main()
