"""The gated sections of report.md (ml-evolve): the held-out `final` scores of the search's
winners, pilot vs full over the promoted candidates, and what Optuna's trials were worth.

The final scores come from the final report's own table (`NodeStore.final_scores`), read here
and nowhere that selects: they describe the outcome and never feed back into the search.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.nodestore import FinalScore
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.rounds.branches import Plan
from evoforge.stages.rounds.plan_data import node_branch
from evoforge.stages.rounds.promotion import PromotionSummary, spearman
from evoforge.stages.tuning.param_study import TuningData


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def final_section(finals: Sequence[FinalScore], nodes: dict[str, Node]) -> list[str]:
    """The winners' held-out scores, in the order the search ranked them."""
    lines = ["## Final (held-out) scores — for this report only, never used for selection", ""]
    if not finals:
        return lines + ["No final evaluation ran (the task has no `final` level, or no winner).", ""]
    lines += ["| node | branch | pilot | full | final | knobs |", "|---|---|---|---|---|---|"]
    for f in finals:
        n = nodes.get(f.node_id)
        knobs = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in sorted((n.params if n else {}).items())) or "-"
        final = _fmt(f.score) if f.error is None else f"failed: {f.error[:60]}"
        branch = node_branch(n) if n else "-"
        lines.append(f"| `{f.node_id}` | {branch} | {_fmt(n.score_pilot if n else None)} | "
                     f"{_fmt(n.score_full if n else None)} | {final} | {knobs} |")
    return lines + [""]


def levels_section(nodes: Sequence[Node], promotions: Sequence[PromotionSummary],
                   maximize: bool) -> list[str]:
    """Pilot vs full over every promoted candidate, and the promotions' verdicts."""
    both = [n for n in nodes if n.score_pilot is not None and n.score_full is not None]
    rho = spearman([n.score_pilot for n in both], [n.score_full for n in both])  # type: ignore[misc]
    noisy = sorted({i for p in promotions for i in p.noisy})
    lines = ["## Pilot vs full (promotion)", "",
             f"{len(promotions)} promotion rounds, {len(both)} candidates scored at both levels; "
             f"Spearman rank correlation {_fmt(rho)}. Noisy (fell in rank at full): "
             f"{', '.join(f'`{i}`' for i in noisy) or 'none'}.", ""]
    return lines


def optuna_section(nodes: Sequence[Node], level: str, maximize: bool) -> list[str]:
    """How much the numbers were worth: best trial vs the structure's declared defaults."""
    tuned = [n for n in nodes if n.status == EVALUATED and TuningData.peek(n).trials_run
             and EngineerData.peek(n).score_default is not None
             and n.score(level) is not None]
    lines = ["## Optuna vs the declared defaults", ""]
    if not tuned:
        return lines + ["No structure was tuned.", ""]
    sign = 1.0 if maximize else -1.0
    gains = [sign * (n.score(level) - EngineerData.peek(n).score_default)  # type: ignore[operator]
             for n in tuned]
    improved = sum(g > 0 for g in gains)
    saturated = sum(TuningData.peek(n).saturation.get("improved") == 0.0 for n in tuned)
    trials = sum(TuningData.peek(n).trials_run for n in tuned)
    lines += [f"{len(tuned)} structures tuned ({trials} trials at the "
              f"`{level}` level): the best trial beat the defaults on {improved}, by "
              f"{statistics.mean(gains):+.4g} on average (median {statistics.median(gains):+.4g}). "
              f"Saturated (the second half of the trials did not improve on the first): {saturated}.", ""]
    return lines


def plan_section(plans: Sequence[Plan]) -> list[str]:
    """The plan versions, one line each."""
    if not plans:
        return []
    lines = ["## Research plan versions", ""]
    for p in plans:
        slots = "; ".join(f"{b.id}: {b.hypothesis[:50]}" for b in p.slots)
        lines.append(f"- v{p.version} (round {p.round}, {p.author}): {slots}")
    return lines + [""]
