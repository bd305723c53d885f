"""The sampling benchmark: latency of each policy's selection and bookkeeping on a synthetic pool.

Builds a synthetic pool of N evaluated nodes (circle-packing programs with varied constants, a
random lineage, scores that drift upwards), replays it into each sampler as a resume would, then
times R rounds of what one candidate costs the sample and commit stages: select a parent, pick
its inspirations, add the (new, unique) child to the pool and the sampler.
"""

from __future__ import annotations

import random
import re
import statistics
import time
from typing import Any

from evoforge.evaluators.task import load_task
from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.inspirations import pick_inspirations
from evoforge.stages.sample.resume import rebuild_sampler

_NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")


class _Programs:
    """Distinct variants of the circle-packing program, made by re-drawing its float constants."""

    def __init__(self, rng: random.Random):
        self.template = load_task("circle_packing").initial_code
        self.slots = _NUMBER.split(self.template)
        self.rng = rng

    def make(self) -> str:
        out = [self.slots[0]]
        for part in self.slots[1:]:
            out.append(f"{self.rng.uniform(0.01, 0.99):.6f}")
            out.append(part)
        return "".join(out)


def synthetic_nodes(count: int, rng: random.Random, programs: _Programs, variants: int = 512) -> list[Node]:
    """`count` evaluated nodes with a random lineage, islands inherited, and drifting scores."""
    codes = [programs.make() for _ in range(min(variants, count))]
    nodes: list[Node] = []
    t0 = 1_700_000_000.0
    for i in range(count):
        parent = nodes[int(len(nodes) * rng.random() ** 0.5)] if nodes else None
        score = (parent.score_full if parent else 1.0) + rng.gauss(0.0, 0.02)
        nodes.append(Node(id=f"n{i:07d}", run_id="bench", code=codes[i % len(codes)],
                          parent_id=parent.id if parent else None,
                          island=(parent.island if i > 5 else i % 5) if parent else 0,
                          generation=parent.generation + 1 if parent else 0,
                          score_full=score, status=EVALUATED, created_at=t0 + i,
                          evaluated_at=t0 + i, origin="novel" if parent else "seed"))
    return nodes


def _child(parent: Node, island: int, index: int, code: str, rng: random.Random) -> Node:
    return Node(id=f"c{index:07d}", run_id="bench", code=code, parent_id=parent.id, island=island,
                generation=parent.generation + 1, status=EVALUATED,
                score_full=(parent.score_full or 0.0) + rng.gauss(0.0, 0.02))


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"p50_ms": round(statistics.median(ordered) * 1e3, 4), "p95_ms": round(p95 * 1e3, 4)}


def time_policy(policy: str, nodes: list[Node], repeat: int, seed: int,
                programs: _Programs) -> dict[str, Any]:
    """Latency of one policy over `repeat` rounds on a pool holding `nodes`."""
    cfg = SearchConfig(sampler=policy)
    started = time.perf_counter()
    pool = Pool.rebuild(nodes, maximize=True, v=0)
    sampler = rebuild_sampler(cfg, nodes, pool)
    build_s = time.perf_counter() - started
    rng = random.Random(seed)
    select, inspire, add, step = [], [], [], []
    codes = [programs.make() for _ in range(repeat)]
    for r in range(repeat):
        t0 = time.perf_counter()
        parent, island = sampler.select_parent_and_island(pool, rng)
        t1 = time.perf_counter()
        pick_inspirations(pool, sampler, parent, rng, cfg.num_inspirations)
        t2 = time.perf_counter()
        child = _child(parent, island, r, codes[r], rng)
        t3 = time.perf_counter()
        pool.add(child)
        sampler.on_node_added(child, pool)
        t4 = time.perf_counter()
        select.append(t1 - t0)
        inspire.append(t2 - t1)
        add.append(t4 - t3)
        step.append((t1 - t0) + (t2 - t1) + (t4 - t3))
    return {"build_s": round(build_s, 3), "select_parent": _percentiles(select),
            "inspirations": _percentiles(inspire), "on_node_added": _percentiles(add),
            "select_plus_add": _percentiles([s + a for s, a in zip(select, add, strict=True)]),
            "per_candidate": _percentiles(step)}


def bench_sampling(count: int, policies: list[str], repeat: int, seed: int) -> dict[str, Any]:
    """The sampling bench as a JSON-ready dict."""
    rng = random.Random(seed)
    programs = _Programs(rng)
    started = time.perf_counter()
    nodes = synthetic_nodes(count, rng, programs)
    made_s = time.perf_counter() - started
    return {"bench": "sampling", "nodes": count, "repeat": repeat, "seed": seed,
            "synthetic_pool_s": round(made_s, 3),
            "policies": {p: time_policy(p, nodes, repeat, seed, programs) for p in policies}}
