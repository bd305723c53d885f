"""Analyze (ASI-Evolve's Analyzer): a structured report on every evaluated candidate — what changed,
what happened, why, what to try next — and the lessons it offers the cognition base.

The analyze stage plug-in, spliced in behind the engineer: it sees every candidate the engineer
hands on (evaluated, failed, pruned) and passes over the ones never evaluated (duplicates, stale
drops). It only fills in the node (`analysis`, `lessons`, its LLM cost): the commit persists the
report (analysis.md, MLflow) and writes the lessons back. A failed LLM call leaves a report
saying so and never fails the candidate.
"""

from __future__ import annotations

from evoforge.infra.config import RunConfig
from evoforge.infra.llm.types import Completion, LLMBackend, LLMError
from evoforge.infra.nodes import Node
from evoforge.infra.prompt_format import ANALYSIS_SECTIONS, EXTRA_SECTION, parse_analysis
from evoforge.stages.analysis_prompt import analysis_messages
from evoforge.stages.pipeline.authorship import LESSONS_BY, answer_author, answer_kind, answer_label
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.pipeline.llm_call import ask_llm
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item

ANALYSIS_BY = "analysis_by"  # node.artifacts key: who wrote the report (LLM, offline, simulated)


class Analyze(Stage):
    """Writes the Analyzer's report onto every evaluated candidate (`analyze.enabled`)."""

    name = "analyze"
    task_run_name = "analyze-{label}"
    workers_like = "research"  # an LLM stage: as many calls at once as research makes

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.analyze.enabled


    def skips(self, item: Item, ctx: StageContext) -> bool:
        return item.node is None or not item.node.was_evaluated

    async def run(self, item: Item, ctx: StageContext) -> StageResult:
        return await analyze(item, ctx)


async def analyze(item: Item, ctx: StageContext) -> StageResult:
    """Ask the LLM for a report on the item's evaluated candidate; a copy of its node comes back
    with the report, its lessons (when `analyze.write_back`) and the call's cost."""
    assert item.node is not None
    if not item.node.was_evaluated:
        return StageResult(item.node)  # nothing ran, nothing to analyse
    node = item.node.copy()
    messages = analysis_messages(item, ctx)
    try:
        completion = await ask_llm(ctx, node, messages)
    except LLMError as exc:
        node.analysis = failed_report(node, ctx.llm, exc)
        node.artifacts[ANALYSIS_BY] = f"nobody: the analysis call failed ({exc})"
        return StageResult(node)
    sections, lessons = parse_analysis(completion.text)
    node.analysis = render_report(node, completion, sections, lessons)
    node.artifacts[ANALYSIS_BY] = answer_author(completion, "analyzer")
    if ctx.config.analyze.write_back and lessons:
        node.lessons = lessons
        node.artifacts[LESSONS_BY] = answer_kind(completion)  # an LLM's reach the shared base
    return StageResult(node)


def render_report(node: Node, completion: Completion, sections: dict[str, str], lessons: list[str]) -> str:
    """The report as markdown: a header naming its author ("# LLM analysis ...", "# Offline ...",
    "# Simulated ..."), the asked-for sections in order (the lessons as parsed), then any text of
    the answer outside them."""
    parts = [f"# {answer_label(completion)} analysis of node {node.id}",
             f"_Written by {answer_author(completion, 'analyzer')}._", ""]
    for name in ANALYSIS_SECTIONS:
        if name == "Lessons":
            body = "\n".join(f"- {lesson}" for lesson in lessons) or "none"
        else:
            body = sections.get(name, "").strip() or "_(not in the answer)_"
        parts += [f"## {name}", body, ""]
    extra = sections.get(EXTRA_SECTION, "").strip()
    if extra:
        parts += [f"## {EXTRA_SECTION}", extra, ""]
    return "\n".join(parts)


def failed_report(node: Node, llm: LLMBackend, exc: LLMError) -> str:
    """The report left when the analysis call failed: which backend, and why."""
    return (f"# No analysis of node {node.id}\n_The analysis call to the {llm.name} "
            f"backend (model {llm.model or 'unknown'}) failed: {exc}._\n")
