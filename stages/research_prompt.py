"""The research prompt: task, parent with its metrics, inspirations, and the answer form asked for."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

from evoforge.cognition.knowledge import Knowledge
from evoforge.evaluators.task import Task
from evoforge.evaluators.task_model import FEEDBACK_ARTIFACT
from evoforge.infra.artifacts import ArtifactKind
from evoforge.infra.artifacts.program import Program
from evoforge.infra.nodes import Node
from evoforge.infra.prompt_format import (
    FORMAT_DIFF,
    FORMAT_PREFIX,
    FORMAT_REWRITE,
    render_feedback_section,
)
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.mutation_contract import CONTRACT, branch_section, tuned_line
from evoforge.stages.prompt_fit import (
    ANALYSIS,
    COGNITION,
    FEEDBACK,
    INSPIRATION,
    METRICS,
    Part,
    PromptTooLarge,
    fit,
    messages_of,
    window_of,
)
from evoforge.stages.rounds.branches import Branch
from evoforge.stages.sample.inspirations import BEST, DIVERSE, RECENT, Inspiration

SYSTEM = Program().system_rules()  # a program's system message (each kind has its own)


def diff_rules(artifact: ArtifactKind) -> str:
    """The rules of an edit answer (a reflection's patch, a repair), asked for in the diff form."""
    extra = artifact.answer_rules()
    return f"{FORMAT_PREFIX} {FORMAT_DIFF}\n{artifact.edit_rules()}" + (f"\n{extra}" if extra else "")


def _label_meaning(label: str, noun: str) -> str:
    return {BEST: f"one of the best {noun}s so far", DIVERSE: f"a good {noun} unlike the parent",
            RECENT: "a recent improvement on its own parent"}.get(label, f"another evaluated {noun}")


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
_T = TypeVar("_T")


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
    artifact = task.artifact
    block = artifact.evolvable(node.code).rstrip()
    return (
        f"### Inspiration {index}: {label} — {_label_meaning(label, artifact.noun)} "
        f"(node {node.id}, score {_score_text(node)})\n"
        f"Motivation: {node.motivation.strip() or 'n/a'}\n```{artifact.fence()}\n{block}\n```\n"
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
    return f"### K{index}: {shown.title} ({shown.kind})\n{shown.text.strip()}\n"


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
    """The chat messages asking for one improved candidate of `parent`, every part shown (see
    `research_parts`; `stages/prompt_fit.py` fits them to a context window)."""
    return messages_of(research_parts(task, parent, inspirations, answer_format, knowledge, branch,
                                      knobs, feedback))


def research_parts(
    task: Task, parent: Node, inspirations: Sequence[Inspiration | Node], answer_format: str,
    knowledge: Sequence[Knowledge] = (), branch: Branch | None = None, knobs: bool = False,
    feedback: str | None = None,
) -> list[Part]:
    """The named parts of the research prompt, in order, each with its drop rank.

    The stable part (the kind's system message, then `stable_prefix(task)`: task, objective, how
    to answer) comes first and stays byte-identical across the calls of a run, so a server's prefix
    cache (vLLM's automatic prefix caching) reuses it; what varies (the mutation contract, the
    parent, knowledge, inspirations, branch, the parent's artifact, citation rules, answer format)
    follows."""
    artifact = task.artifact
    parts = [Part("system", artifact.system_rules(), role="system"), Part("task", stable_prefix(task))]
    if knobs:  # the same for every parent of a knob-declaring task: the prefix reaches past it
        parts.append(Part("contract", CONTRACT))
    parts += [Part("parent", f"## Parent (node {parent.id}, score {_score_text(parent)})"),
              Part("metrics", f"Metrics: {_metrics_line(parent)}", METRICS)]
    tuned = tuned_line(parent)
    if tuned:
        parts.append(Part("parent knobs", tuned))
    if parent.motivation.strip():
        parts.append(Part("parent motivation", f"How it came about: {parent.motivation.strip()[:600]}",
                          ANALYSIS))
    analysis = AnalysisData.peek(parent).report.strip()
    if analysis:
        parts.append(Part("parent analysis",
                          f"### What the Analyzer found about the parent\n{analysis[:_ANALYSIS_CHARS]}",
                          ANALYSIS, short=f"### What the Analyzer found about the parent\n{analysis[:300]}"))
    feedback = (parent.artifacts.get(FEEDBACK_ARTIFACT, "") if feedback is None else feedback).strip()
    if feedback:  # a task model's cases: what went wrong on them (GEPA's reflective data)
        lines = feedback[:_ANALYSIS_CHARS].splitlines()
        parts.append(Part("feedback", render_feedback_section(lines), FEEDBACK,
                          short=render_feedback_section(lines[:3]) if len(lines) > 3 else ""))
    if knowledge:
        parts.append(Part("knowledge heading", "## Prior knowledge (retrieved from the cognition base)",
                          requires="knowledge K"))
        parts += [Part(f"knowledge K{i + 1}", _knowledge(k, i + 1), COGNITION)
                  for i, k in enumerate(knowledge)]
    if inspirations:
        parts.append(Part("inspirations heading", artifact.inspiration_header(), requires="inspiration "))
        parts += [Part(f"inspiration {i + 1}", _inspiration(n, i + 1, task), INSPIRATION)
                  for i, n in enumerate(inspirations)]
    section = branch_section(branch)
    if section:
        parts.append(Part("branch", section))
    parts.append(Part("parent artifact", artifact.show(parent.code)))
    if inspirations:
        parts.append(Part("inspirations rule", _USED_RULE, requires="inspiration "))
    if knowledge:
        parts.append(Part("knowledge rule", _IDEAS_RULE, requires="knowledge K"))
    form = FORMAT_DIFF if answer_format == FORMAT_DIFF else FORMAT_REWRITE
    parts.append(Part("answer format", f"{FORMAT_PREFIX} {form} ({artifact.format_reminder(form)})"))
    return parts


def shown(items: Sequence[_T], dropped: Sequence[str], label: str) -> list[_T]:
    """The items a fitted prompt still shows: those whose part `<label><number>` was not dropped."""
    return [item for i, item in enumerate(items) if f"{label}{i + 1}" not in dropped]


def stable_prefix(task: Task) -> str:
    """The start of every research prompt of a run (after the system message): the task, its
    objective and how to answer, in both answer forms; it ends with a newline."""
    goal = "maximize" if task.direction == "maximize" else "minimize"
    artifact = task.artifact
    extra = artifact.answer_rules()
    return "\n".join([
        f"# Task: {task.name}",
        task.description.strip() or f"Improve the {artifact.noun}.",
        f"Objective: {goal} the metric `{task.objective}`.",
        artifact.answer_forms() + (f"\n{extra}\n" if extra else ""),
    ])


def seed_fit_error(task: Task, llm: object, max_tokens: int) -> str | None:
    """The one line saying the seed's research prompt (task, answer rules, the seed itself) does not
    fit `llm`'s context window with `max_tokens` of room for the answer; None when it fits or the
    window is unknown."""
    seed = Node(id="seed", run_id="", code=task.initial_code)
    window, count = window_of(llm)
    try:
        fit(research_parts(task, seed, [], FORMAT_REWRITE), window, max_tokens, count)
    except PromptTooLarge as exc:
        endpoint = getattr(llm, "base_url", None) or getattr(llm, "name", "the LLM")
        return (f"the seed ({exc.needed} tokens) does not fit the context window ({exc.window}) of "
                f"{endpoint} minus llm.max_tokens ({exc.max_tokens}): lower llm.max_tokens, shorten "
                f"the seed or the task description, or use a model with a larger context")
    return None
