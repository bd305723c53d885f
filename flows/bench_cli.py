"""`evoforge bench sampling`: how long parent selection takes per policy as the pool grows (JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_bench_parser(subparsers: Any) -> None:
    """Add `bench sampling --nodes N [--policies ...] [--repeat R]` to the CLI."""
    bench = subparsers.add_parser("bench", help="micro-benchmarks of evoforge's own machinery")
    which = bench.add_subparsers(dest="bench", required=True)
    sampling = which.add_parser("sampling", help="parent-selection latency per policy (JSON)")
    sampling.add_argument("--nodes", type=int, default=10_000, help="synthetic pool size")
    sampling.add_argument("--policies", nargs="+", help="samplers to time (default: all)")
    sampling.add_argument("--repeat", type=int, default=200, help="timed rounds per policy")
    sampling.add_argument("--seed", type=int, default=0)


def run_bench(ns: argparse.Namespace) -> int:
    """Run the bench the arguments name and print its JSON; returns the exit code."""
    # loaded here, not at the top: the stages are not needed to build the CLI's parser
    from evoforge.stages.sample import sampler_names
    from evoforge.stages.sample.benchmark import bench_sampling

    policies = ns.policies or sampler_names()
    unknown = sorted(set(policies) - set(sampler_names()))
    if unknown or ns.nodes < 1 or ns.repeat < 1:
        problem = f"unknown policies {unknown}" if unknown else "--nodes and --repeat must be >= 1"
        print(f"evoforge: error: bench sampling: {problem} (policies: {', '.join(sampler_names())})",
              file=sys.stderr)
        return 2
    print(json.dumps(bench_sampling(ns.nodes, policies, ns.repeat, ns.seed), indent=2))
    return 0
