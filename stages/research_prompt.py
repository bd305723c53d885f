"""The research prompt: task, parent with its metrics, inspirations, and the answer form asked for."""

from __future__ import annotations

import re
from collections.abc import Sequence

from evoforge.cognition.knowledge import Knowledge
from evoforge.evaluators.task import Task
from evoforge.evaluators.task_model import FEEDBACK_ARTIFACT
from evoforge.infra.nodes import Node
from evoforge.infra.prompt_format import (
    FORMAT_DIFF,
    FORMAT_PREFIX,
    FORMAT_REWRITE,
    render_feedback_section,
)
from evoforge.stages.mutation_contract import CONTRACT, branch_section, tuned_line
from evoforge.stages.rounds.branches import Branch
from evoforge.stages.sample.inspirations import BEST, DIVERSE, RECENT, Inspiration

SYSTEM = (
    "You are an expert researcher and engineer improving a program through careful, testable "
    "changes. Only the region between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change; "
    "everything outside it is fixed and must stay byte-for-byte the same."
)

_BLOCK_EXAMPLE = """<<<<<<< SEARCH
exact lines from the current program
=======
the lines that replace them
>>>>>>> REPLACE
"""

DIFF_RULES = f"""{FORMAT_PREFIX} {FORMAT_DIFF}
Start with one or two sentences of motivation: what you change and why it should help.
Then give one or more SEARCH/REPLACE blocks. Each SEARCH part must match the current program
exactly (whitespace included) and appear in it once:

{_BLOCK_EXAMPLE}"""

# The research prompt describes both answer forms in its stable part (so the prefix a server
# caches is the same for diff and rewrite calls) and names the one it wants on its last line.
_ANSWER_RULES = f"""## How to answer
Start with one or two sentences of motivation: what you change and why it should help. Then give
the change in the answer format named on the last line of this message:

- diff: one or more SEARCH/REPLACE blocks. Each SEARCH part must match the current program
  exactly (whitespace included) and appear in it once:

{_BLOCK_EXAMPLE}
- rewrite: the complete new program in one ```python fenced block, keeping the EVOLVE markers
  and everything outside the EVOLVE block unchanged.
"""
_FORMAT_REMINDER = {
    FORMAT_DIFF: "SEARCH/REPLACE blocks, as described above",
    FORMAT_REWRITE: "the complete program in one fenced block, as described above",
}


_LABEL_MEANING = {
    BEST: "one of the best programs so far",
    DIVERSE: "a good program unlike the parent",
    RECENT: "a recent improvement on its own parent",
}
def _citation_line(prefix: str) -> re.Pattern[str]:
    """A line `<prefix> …` of an answer, tolerating markdown emphasis; group 1 is the rest."""
    return re.compile(r"^[ \t>*_`]*" + re.escape(prefix) + r"[ \t*_`]*([^\n]*)\n?",
                      re.IGNORECASE | re.MULTILINE)


_USED_PREFIX = "Inspirations used:"
_USED_RE = _citation_line(_USED_PREFIX)
_USED_RULE = (
    f"After the motivation, add one line `{_USED_PREFIX} 1, 3` naming the numbers of the "
    f"inspirations your change draws on, or `{_USED_PREFIX} none`."
)


_IDEAS_PREFIX = "Ideas used:"
_IDEAS_RE = _citation_line(_IDEAS_PREFIX)
_IDEAS_RULE = (
    f"Also add one line `{_IDEAS_PREFIX} K1, K3` naming the prior knowledge your change applies, "
    f"or `{_IDEAS_PREFIX} none`."
)
_ANALYSIS_CHARS = 1500


def _metrics_line(node: Node) -> str:
    shown = ", ".join(f"{k}={v:.6g}" for k, v in sorted(node.metrics.items())[:12])
    return shown or "no metrics"


def _score_text(node: Node) -> str:
    if node.score_full is not None and node.score_pilot is not None:
        return f"{node.score_pilot:.6g} at the pilot level, {node.score_full:.6g} at full"
    if node.score_full is not None:
        return f"{node.score_full:.6g}"
    if node.score_pilot is not None:
        return f"{node.score_pilot:.6g} at the pilot level"
    if node.score_partial is not None:
        return f"{node.score_partial:.6g} on a validation prefix"
    return "n/a"


def _inspiration(shown: Inspiration | Node, index: int, task: Task) -> str:
    node, label = (shown.node, shown.label) if isinstance(shown, Inspiration) else (shown, "other")
    block = task.artifact.evolvable(node.code).rstrip()
    return (
        f"### Inspiration {index}: {label} — {_LABEL_MEANING.get(label, 'another evaluated program')} "
        f"(node {node.id}, score {_score_text(node)})\n"
        f"Motivation: {node.motivation.strip() or 'n/a'}\n```python\n{block}\n```\n"
    )


def inspirations_used(answer: str, inspirations: Sequence[Inspiration | Node]) -> list[str]:
    """Node ids of the inspirations an answer says it used (its `Inspirations used:` line)."""
    return _cited(answer, _USED_RE, r"\d+", [n.id for n in inspirations])


def _cited(answer: str, line: re.Pattern[str], number: str, shown_ids: Sequence[str]) -> list[str]:
    """The ids of the shown items that the answer's citation line names by number (1-based),
    once each, in the order named; numbers of items not shown are ignored."""
    match = line.search(answer)
    if match is None:
        return []
    ids: list[str] = []
    for found in re.findall(number, match.group(1), re.IGNORECASE):
        index = int(found) - 1
        if 0 <= index < len(shown_ids) and shown_ids[index] not in ids:
            ids.append(shown_ids[index])
    return ids


def without_used_line(motivation: str) -> str:
    """The motivation with the `Inspirations used:` and `Ideas used:` lines taken out."""
    return _IDEAS_RE.sub("", _USED_RE.sub("", motivation)).strip()


def _knowledge(shown: Knowledge, index: int) -> str:
    kind = "human prior" if shown.from_seed else "lesson learned in earlier experiments"
    return f"### K{index}: {shown.title} ({kind})\n{shown.text.strip()}\n"


def ideas_used(answer: str, knowledge: Sequence[Knowledge]) -> list[str]:
    """Cognition ids of the prior knowledge an answer says it used (its `Ideas used:` line),
    cross-checked against the items it was shown."""
    return _cited(answer, _IDEAS_RE, r"K\s*(\d+)", [k.id for k in knowledge])


def origin_of(used_ideas: Sequence[str], knowledge: Sequence[Knowledge],
              used_inspirations: Sequence[str]) -> str:
    """ASI-Evolve's origin of a design: `cognition` when it says it used a human prior,
    `experience` when it used a lesson written back by the Analyzer or another evaluated program
    (an inspiration), `novel` otherwise."""
    by_id = {k.id: k for k in knowledge}
    if any(by_id[i].from_seed for i in used_ideas if i in by_id):
        return "cognition"
    if used_ideas or used_inspirations:
        return "experience"
    return "novel"


def research_messages(
    task: Task, parent: Node, inspirations: Sequence[Inspiration | Node], answer_format: str,
    knowledge: Sequence[Knowledge] = (), branch: Branch | None = None, knobs: bool = False,
    feedback: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages asking for one improved candidate of `parent`.

    The stable part (the system message, then `stable_prefix(task)`: task, objective, how to
    answer) comes first and stays byte-identical across the calls of a run, so a server's prefix
    cache (vLLM's automatic prefix caching) reuses it; what varies (the mutation contract, the
    parent, knowledge, inspirations, branch, program, citation rules, answer format) follows."""
    parts = [stable_prefix(task)]
    if knobs:  # the same for every parent of a knob-declaring task: the prefix reaches past it
        parts.append(CONTRACT)
    parts += [
        f"## Parent (node {parent.id}, score {_score_text(parent)})",
        f"Metrics: {_metrics_line(parent)}",
    ]
    tuned = tuned_line(parent)
    if tuned:
        parts.append(tuned)
    if parent.motivation.strip():
        parts.append(f"How it came about: {parent.motivation.strip()[:600]}")
    if parent.analysis.strip():
        analysis = parent.analysis.strip()[:_ANALYSIS_CHARS]
        parts.append(f"### What the Analyzer found about the parent\n{analysis}")
    feedback = (parent.artifacts.get(FEEDBACK_ARTIFACT, "") if feedback is None else feedback).strip()
    if feedback:  # a task model's cases: what went wrong on them (GEPA's reflective data)
        parts.append(render_feedback_section(feedback[:_ANALYSIS_CHARS].splitlines()))
    if knowledge:
        parts.append("## Prior knowledge (retrieved from the cognition base)")
        parts.extend(_knowledge(k, i + 1) for i, k in enumerate(knowledge))
    if inspirations:
        parts.append("## Inspirations (EVOLVE blocks of other evaluated programs)")
        parts.extend(_inspiration(n, i + 1, task) for i, n in enumerate(inspirations))
    section = branch_section(branch)
    if section:
        parts.append(section)
    parts.append(task.artifact.show(parent.code))
    if inspirations:
        parts.append(_USED_RULE)
    if knowledge:
        parts.append(_IDEAS_RULE)
    form = FORMAT_DIFF if answer_format == FORMAT_DIFF else FORMAT_REWRITE
    parts.append(f"{FORMAT_PREFIX} {form} ({_FORMAT_REMINDER[form]})")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(parts)}]


def stable_prefix(task: Task) -> str:
    """The start of every research prompt of a run (after the system message): the task, its
    objective and how to answer, in both answer forms; it ends with a newline."""
    goal = "maximize" if task.direction == "maximize" else "minimize"
    return "\n".join([
        f"# Task: {task.name}",
        task.description.strip() or "Improve the program.",
        f"Objective: {goal} the metric `{task.objective}`.",
        _ANSWER_RULES + (f"\n{task.artifact.answer_rules()}\n" if task.artifact.answer_rules() else ""),
    ])
