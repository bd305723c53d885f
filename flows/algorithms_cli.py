"""`evoforge algorithms`: the registered algorithms, one line each — name, the artifact kinds it
evolves, its main-line stages in order, and what it is."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_algorithms_parser(sub: Any) -> None:
    algorithms = sub.add_parser("algorithms", help="list the algorithms: kinds they evolve, their stages")
    algorithms.add_argument("--json", action="store_true", help="the rows as JSON")


def algorithm_rows() -> list[dict[str, Any]]:
    """One row per registered algorithm, in registry order."""
    from evoforge.stages.algorithms import ALGORITHMS

    rows = []
    for name, cls in ALGORITHMS.items():
        pipeline = cls().pipeline()
        rows.append({"name": name, "kinds": list(cls.kinds), "stages": [s.name for s in pipeline.line],
                     "side": [s.name for s in pipeline.side], "about": cls.about})
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as lines: name, kinds, stages, about."""
    wide = max((len(r["name"]) for r in rows), default=0) + 2
    kinds = max((len(",".join(r["kinds"])) for r in rows), default=0) + 2
    return "\n".join(f"{r['name']:<{wide}}{','.join(r['kinds']):<{kinds}}{' -> '.join(r['stages'])}  "
                     f"{r['about']}" for r in rows)


def run_algorithms(ns: argparse.Namespace) -> int:
    rows = algorithm_rows()
    print(json.dumps(rows, indent=2) if ns.json else render(rows))
    if not ns.json:
        print("run one: evoforge run TASK --algorithm NAME (or a .py file: docs/extend/algorithm.md, "
              "\"Write an algorithm\"); evoforge stages --algorithm NAME shows its pipeline in full",
              file=sys.stderr)
    return 0
