"""report.md: where a run's designs came from (ASI-Evolve's origin breakdown) and what it learned.

Every candidate has an origin (`stages/prompts.origin_of`): `cognition` when its answer says it
applied a seeded human prior, `experience` when it applied a lesson an Analyzer wrote back or
another evaluated program (an inspiration), `novel` otherwise. The breakdown is given over all
designs and over the top 10% of the fully evaluated ones; then the lessons written back.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from evoforge.cognition.entries import text_id
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.analysis_data import AnalysisData

ORIGINS = ("cognition", "experience", "novel")


def designs(nodes: Sequence[Node]) -> list[Node]:
    """The candidates an LLM (or the offline proposer) designed: every non-seed node with code."""
    return [n for n in nodes if n.origin != "seed" and n.code]


def top_share(nodes: Sequence[Node], maximize: bool, share: float = 0.1,
              level: str = "full") -> list[Node]:
    """The best `share` (at least one) of the evaluated designs, by their `level` score."""
    scored = [n for n in designs(nodes) if n.status == EVALUATED and n.score(level) is not None]
    scored.sort(key=lambda n: n.score(level), reverse=maximize)  # type: ignore[arg-type,return-value]
    return scored[:max(1, math.ceil(share * len(scored)))] if scored else []


def origin_breakdown(nodes: Sequence[Node]) -> dict[str, float]:
    """Percent of `nodes` per origin (0 for an origin none has)."""
    counts = Counter(n.origin for n in nodes)
    total = sum(counts[o] for o in ORIGINS)
    return {o: round(100.0 * counts[o] / total, 1) if total else 0.0 for o in ORIGINS}


def lessons_written(nodes: Sequence[Node]) -> list[tuple[str, str]]:
    """(node id, lesson) for each lesson that entered the cognition base in this run."""
    out = []
    for node in nodes:
        ids = set(node.artifacts.get("lessons_written", "").split(","))
        out += [(node.id, lesson) for lesson in AnalysisData.peek(node).lessons if text_id(lesson) in ids]
    return out


def report_md(task_name: str, nodes: Sequence[Node], maximize: bool, level: str = "full",
              sections: Sequence[str] = ()) -> str:
    """The run's report as markdown; `sections` (markdown) come first (a gated run's final
    scores and level comparisons: levels/reports/gated_report.py)."""
    all_designs, top = designs(nodes), top_share(nodes, maximize, level=level)
    overall, best = origin_breakdown(all_designs), origin_breakdown(top)
    backends = sorted({n.backend for n in all_designs if n.backend})
    lines = [f"# Report: {task_name}", "",
             f"{len(all_designs)} designs ({', '.join(backends) or 'none'}), "
             f"{sum(n.status == EVALUATED for n in all_designs)} fully evaluated.", "",
             *sections,
             "## Where the designs came from", "",
             "| origin | all designs | top 10% |", "|---|---|---|"]
    lines += [f"| {o} | {overall[o]}% | {best[o]}% |" for o in ORIGINS]
    lines += ["", f"Top 10%: {len(top)} candidates. `cognition`: the answer applied a seeded prior "
              "it names; `experience`: a lesson written back by the Analyzer, or another "
              "program; `novel`: neither.", ""]
    written = lessons_written(nodes)
    lines += [f"## Lessons written back to the cognition base ({len(written)})", ""]
    lines += [f"- {lesson} (node `{node_id}`)" for node_id, lesson in written] or ["none"]
    return "\n".join(lines) + "\n"
