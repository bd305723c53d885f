"""report.md of a run, with its plots: written at the end of every run and by `evoforge report`.

For a gated ML task the held-out final scores, the pilot-vs-full comparison of the promotions,
what Optuna bought and the plan versions come first; for a text or playbook task, the winners'
held-out test scores; for a run that reached a task model, its usage; every run gets the plots
(report/*.png).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evoforge.evaluators.task import TASK_MODEL_KINDS
from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import FinalScore, NodeStore
from evoforge.infra.runfiles import RunPaths, write_atomic
from evoforge.stages.analysis_data import BY_LLM, BY_OFFLINE, BY_SUMMARY, AnalysisData
from evoforge.stages.reports.claims_report import claims_section
from evoforge.stages.reports.failures_report import failures_section
from evoforge.stages.reports.figures import Figure, report_figures
from evoforge.stages.reports.gated_report import final_section, levels_section, optuna_section, plan_section
from evoforge.stages.reports.origins import report_md
from evoforge.stages.reports.task_model_report import held_out_section, usage_section
from evoforge.stages.rounds.branches import Plan
from evoforge.stages.rounds.promotion import PromotionSummary
from evoforge.stages.rounds.records import PLANS_META, PROMOTIONS_META, plan_from_dict, summary_from_dict
from evoforge.stages.tuning.param_study import TuningData


@dataclass(frozen=True)
class RunFacts:
    """What the report is about: the task's name and direction, its search level, whether it is
    gated, its artifact kind, and the run's usage of its task model (status.json's `task_model`)."""

    task: str
    maximize: bool
    search_level: str = "full"
    gated: bool = False
    kind: str = "program"
    task_model: Mapping[str, float] | None = None  # None: the run reached no task model


def rounds_of(store: NodeStore) -> tuple[list[Plan], list[PromotionSummary]]:
    """The plan versions and promotion rounds the run recorded in its node database."""
    return ([plan_from_dict(p) for p in store.get_meta(PLANS_META, [])],
            [summary_from_dict(p) for p in store.get_meta(PROMOTIONS_META, [])])


def held_out(store: NodeStore) -> list[FinalScore]:
    """The final report's held-out scores (for report.md only)."""
    return store.final_scores()


def held_out_cost(store: NodeStore) -> tuple[float, float]:
    """(seconds, CPU seconds) the held-out evaluations took: the run's cost, never its scores."""
    rows = store.final_scores()
    return sum(r.seconds for r in rows), sum(r.cpu_s for r in rows)


NOT_DRAWN = ("Not drawn: the run was interrupted. `evoforge report RUN` draws them, and so does the end "
             "of the resumed run.")


def analyses_section(nodes: Sequence[Node]) -> list[str]:
    """How the candidates were analysed: by the LLM, or by the deterministic summary while the LLM
    bound (none when the run analysed nothing)."""
    by = [AnalysisData.peek(n).by for n in nodes]
    llm, offline, summary = by.count(BY_LLM), by.count(BY_OFFLINE), by.count(BY_SUMMARY)
    if not llm and not offline and not summary:
        return []
    return ["## Analyses", "", f"- analysed_llm: {llm} (reports the LLM wrote)",
            f"- analysed_offline: {offline} (reports of the offline analyzer: no LLM)",
            f"- analysed_summary: {summary} (deterministic summaries: the LLM was busy with more urgent "
            f"calls)", ""]


def write_report(paths: RunPaths, nodes: Sequence[Node], finals: Sequence[FinalScore], facts: RunFacts,
                 best_id: str | None, plans: Sequence[Plan] = (), promotions: Sequence[PromotionSummary] = (),
                 draw: bool = True) -> tuple[str, list[Figure]]:
    """Write report.md and its plots from the run's nodes and held-out final scores (the end of
    a run has them in memory; `evoforge report` reads them from the node database); returns the
    text and the figures drawn (`draw=False`, an interrupted run's: none, and the report says so)."""
    nodes = list(nodes)
    sections: list[str] = []
    if facts.gated:
        sections = [*final_section(list(finals), {n.id: n for n in nodes}),
                    *levels_section(nodes, promotions, facts.maximize),
                    *optuna_section(nodes, facts.search_level, facts.maximize),
                    *plan_section(plans)]
    elif finals or facts.kind in TASK_MODEL_KINDS:  # a task without levels holds test scores only
        sections = held_out_section(list(finals), {n.id: n for n in nodes})
    elif any(TuningData.peek(n).trials_run for n in nodes):
        sections = optuna_section(nodes, facts.search_level, facts.maximize)
    if facts.task_model is not None:
        sections += usage_section(facts.task_model)
    sections += analyses_section(nodes)
    sections += claims_section(nodes)
    sections += failures_section(nodes)
    if draw:
        figures, drawn = report_figures(paths, nodes, facts.search_level, facts.maximize, best_id=best_id)
    else:  # Ctrl+C exits at once: drawing takes 0.8-2.6 s, and `evoforge report` draws them later
        figures, drawn = ["## Figures", "", NOT_DRAWN, ""], []
    text = report_md(facts.task, nodes, facts.maximize, level=facts.search_level, sections=sections)
    text += "\n" + "\n".join(figures)
    write_atomic(paths.report, text)
    return text, drawn
