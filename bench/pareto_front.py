"""Pareto parent selection at a large pool: the front kept from the hooks vs computed per selection.

Two pools of `--nodes` evaluated nodes: the sampling bench's synthetic pool (`evoforge bench
sampling`, no per-case scores: the sampler falls back to the best), and one whose nodes carry
`--cases` per-case scores that drift upwards along a random lineage (GEPA's validation scores).
Per pool: p50 / p95 of `select_parent` plus adding a new child (what one candidate costs the
sampler), for the sampler as it is and, on `--old-repeat` rounds, for the selection that
recomputes the front from the whole pool each time (the code before issue 28).

    python bench/pareto_front.py --nodes 100000 --out bench/results/pareto_100k_after.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.benchmark import _Programs, synthetic_nodes
from evoforge.stages.sample.pareto import case_wins, pareto_front
from evoforge.stages.sample.resume import rebuild_sampler


def old_select(pool: Pool, rng: random.Random) -> Node:
    """The selection before the front was kept incrementally."""
    front = pareto_front(pool)
    if not front:
        return pool.best if pool.best is not None else rng.choice(pool.nodes)
    wins = case_wins(pool)
    return rng.choices(front, weights=[wins[n.id] for n in front], k=1)[0]


def case_scored(nodes: list[Node], cases: int, rng: random.Random) -> list[Node]:
    """The nodes with per-case scores: each case drifts from the parent's value."""
    by_id: dict[str, Node] = {}
    for node in nodes:
        parent = by_id.get(node.parent_id or "")
        base = parent.case_scores if parent else {f"c{k}": rng.random() for k in range(cases)}
        node.case_scores = {c: v + rng.gauss(0.0, 0.02) for c, v in base.items()}
        node.score_full = statistics.fmean(node.case_scores.values())
        by_id[node.id] = node
    return nodes


def _child(parent: Node, index: int, rng: random.Random) -> Node:
    scores = {c: v + rng.gauss(0.0, 0.02) for c, v in parent.case_scores.items()}
    return Node(id=f"new{index:07d}", run_id="bench", code=f"# {index}", parent_id=parent.id,
                status=EVALUATED, case_scores=scores,
                score_full=statistics.fmean(scores.values()) if scores else parent.score_full)


def _p(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(1000 * statistics.median(ordered), 4),
            "p95_ms": round(1000 * ordered[int(round(0.95 * (len(ordered) - 1)))], 4), "n": len(ordered)}


def time_pool(nodes: list[Node], repeat: int, old_repeat: int, seed: int) -> dict[str, Any]:
    """Selection + add latency of the pareto sampler on a pool of `nodes`, new and old."""
    cfg = SearchConfig(sampler="pareto")
    started = time.perf_counter()
    pool = Pool.rebuild(nodes, maximize=True, v=0)
    sampler = rebuild_sampler(cfg, nodes, pool)
    build_s = time.perf_counter() - started
    rng = random.Random(seed)
    select, add = [], []
    for r in range(repeat):
        t0 = time.perf_counter()
        parent = sampler.select_parent(pool, rng)
        t1 = time.perf_counter()
        child = _child(parent, r, rng)
        t2 = time.perf_counter()
        pool.add(child)
        sampler.on_node_added(child, pool)
        t3 = time.perf_counter()
        select.append(t1 - t0)
        add.append(t3 - t2)
    old = []
    for _ in range(old_repeat):
        t0 = time.perf_counter()
        old_select(pool, rng)
        old.append(time.perf_counter() - t0)
    front, _ = sampler.front.members()
    return {"build_s": round(build_s, 3), "front_size": len(front),
            "select_parent": _p(select), "on_node_added": _p(add),
            "select_plus_add": _p([s + a for s, a in zip(select, add, strict=True)]),
            "old_select_parent": _p(old) if old else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--cases", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--old-repeat", type=int, default=3, help="rounds of the recomputing selection")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    plain = synthetic_nodes(args.nodes, rng, _Programs(rng))
    row: dict[str, Any] = {"bench": "pareto_front", "nodes": args.nodes, "cases": args.cases,
                           "repeat": args.repeat, "seed": args.seed,
                           "no_case_scores": time_pool(plain, args.repeat, args.old_repeat, args.seed)}
    scored = case_scored(synthetic_nodes(args.nodes, rng, _Programs(rng)), args.cases, rng)
    row["case_scored"] = time_pool(scored, args.repeat, args.old_repeat, args.seed)
    text = json.dumps(row, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    print(f"pareto select p50 at {args.nodes} nodes: "
          f"{row['no_case_scores']['select_parent']['p50_ms']} ms (no case scores), "
          f"{row['case_scored']['select_parent']['p50_ms']} ms ({args.cases} cases)", file=sys.stderr)


if __name__ == "__main__":
    main()
