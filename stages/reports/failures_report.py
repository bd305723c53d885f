"""report.md's failures: every failed, rejected or stale node counted under its one reason, with
what the reason means and one of its errors (status.json's `failures_by_reason` counts the same)."""

from __future__ import annotations

from collections.abc import Sequence

from evoforge.infra.failure_reasons import MEANING
from evoforge.infra.nodes import Node
from evoforge.stages.population.stats import reason_of
from evoforge.stages.reports.status import by_reason

_EXAMPLE_CHARS = 160


def failures_section(nodes: Sequence[Node]) -> list[str]:
    """## Failures by reason: a row per reason with its count, meaning and an example error (the
    section says so when nothing failed)."""
    counts: dict[str, int] = {}
    example: dict[str, str] = {}
    for node in nodes:
        reason = reason_of(node)
        if reason is None:
            continue
        counts[reason] = counts.get(reason, 0) + 1
        if node.error and reason not in example:
            example[reason] = " ".join(node.error.split())[:_EXAMPLE_CHARS]
    lines = ["## Failures by reason", ""]
    if not counts:
        return [*lines, "No candidate failed, was rejected or went stale.", ""]
    lines += ["| reason | nodes | what it means | e.g. |", "|---|---|---|---|"]
    for reason, count in by_reason(counts).items():
        cell = example.get(reason, "").replace("|", "\\|")
        lines.append(f"| {reason} | {count} | {MEANING.get(reason, '')} | {cell} |")
    return [*lines, "", "docs/guide/watching.md explains each reason.", ""]
