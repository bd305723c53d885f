"""The research prompt: task, parent with its metrics, inspirations, and the answer form asked for."""

from __future__ import annotations

from evoforge.evaluators.task import Task
from evoforge.infra.evolve_block import split_program
from evoforge.infra.nodes import Node
from evoforge.infra.prompt_format import (
    FORMAT_DIFF,
    FORMAT_PREFIX,
    render_program_section,
)

SYSTEM = (
    "You are an expert researcher and engineer improving a program through careful, testable "
    "changes. Only the region between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change; "
    "everything outside it is fixed and must stay byte-for-byte the same."
)

_DIFF_RULES = f"""{FORMAT_PREFIX} {FORMAT_DIFF}
Start with one or two sentences of motivation: what you change and why it should help.
Then give one or more SEARCH/REPLACE blocks. Each SEARCH part must match the current program
exactly (whitespace included) and appear in it once:

<<<<<<< SEARCH
exact lines from the current program
=======
the lines that replace them
>>>>>>> REPLACE
"""

_REWRITE_RULES = f"""{FORMAT_PREFIX} rewrite
Start with one or two sentences of motivation: what you change and why it should help.
Then give the complete new program in one ```python fenced block, keeping the EVOLVE markers and
everything outside the EVOLVE block unchanged.
"""


def _metrics_line(node: Node) -> str:
    shown = ", ".join(f"{k}={v:.6g}" for k, v in sorted(node.metrics.items())[:12])
    return shown or "no metrics"


def _inspiration(node: Node, index: int) -> str:
    block = split_program(node.code).block.rstrip()
    return (
        f"### Inspiration {index} (node {node.id}, score {node.score_full:.6g})\n"
        f"Motivation: {node.motivation.strip() or 'n/a'}\n```python\n{block}\n```\n"
    )


def research_messages(
    task: Task, parent: Node, inspirations: list[Node], answer_format: str
) -> list[dict[str, str]]:
    """The chat messages asking for one improved candidate of `parent`."""
    goal = "maximize" if task.direction == "maximize" else "minimize"
    parts = [
        f"# Task: {task.name}",
        task.description.strip() or "Improve the program.",
        f"Objective: {goal} the metric `{task.objective}`.",
        f"## Parent (node {parent.id}, score {parent.score_full:.6g})",
        f"Metrics: {_metrics_line(parent)}",
    ]
    if parent.motivation.strip():
        parts.append(f"How it came about: {parent.motivation.strip()[:600]}")
    if inspirations:
        parts.append("## Inspirations (EVOLVE blocks of other evaluated programs)")
        parts.extend(_inspiration(n, i + 1) for i, n in enumerate(inspirations))
    parts.append(render_program_section(parent.code))
    parts.append(_DIFF_RULES if answer_format == FORMAT_DIFF else _REWRITE_RULES)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(parts)}]
