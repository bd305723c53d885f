"""The commit side of the round jobs: a new research plan, a promotion's full scores.

The plan agent and the promotion run beside the pipeline; what they decide reaches the run
through here, applied by the commit coroutine like every other result: the pool version moves,
the nodes gain their full scores, and research_plan.md, the run metadata (for resume) and
MLflow follow.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from evoforge.infra.runfiles import write_atomic
from evoforge.stages.rounds.branches import Branch, KillCriteria, Plan, SlotDecision
from evoforge.stages.rounds.promotion import Promoted, PromotionSummary, promotion_md
from evoforge.stages.sinks.mlflow_runs import PROMOTION, promotion_runs

if TYPE_CHECKING:
    from evoforge.stages.sinks.commit import Committer

NEW_WINNER = "new_winner"  # history: a promotion changed which node wins at `full`
PLANS_META, PROMOTIONS_META = "plans", "promotions"


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    return dataclasses.asdict(plan)


def _branch(data: dict[str, Any]) -> Branch:
    return Branch(**{**data, "kill": KillCriteria(**data["kill"])})


def plan_from_dict(data: dict[str, Any]) -> Plan:
    """A plan as `plan_to_dict` stored it."""
    return Plan(**{**data, "slots": tuple(_branch(b) for b in data["slots"]),
                   "retired": tuple((_branch(b), why) for b, why in data["retired"]),
                   "decisions": tuple(SlotDecision(**d) for d in data["decisions"])})


def summary_from_dict(data: dict[str, Any]) -> PromotionSummary:
    return PromotionSummary(**{**data, "promoted": tuple(data["promoted"]),
                               "results": tuple(Promoted(**r) for r in data["results"]),
                               "consistent": tuple(data["consistent"]), "noisy": tuple(data["noisy"])})


class RoundRecords:
    """Plans and promotions of the run, as the commit applied them."""

    def __init__(self, committer: Committer) -> None:
        self.committer = committer
        self.plans: list[Plan] = []
        self.promotions: list[PromotionSummary] = []

    @property
    def plan(self) -> Plan | None:
        """The current plan (None: the run has no plan agent)."""
        return self.plans[-1] if self.plans else None

    def restore(self, plans: list[dict[str, Any]], promotions: list[dict[str, Any]]) -> None:
        """Rebuild from the run metadata (resume)."""
        self.plans = [plan_from_dict(p) for p in plans]
        self.promotions = [summary_from_dict(p) for p in promotions]

    def record_plan(self, plan: Plan, plan_md: str) -> None:
        """A new plan version: the pool version moves, research_plan.md and MLflow follow."""
        c = self.committer
        self.plans.append(plan)
        c.pool.v += 1
        c._put_meta("pool_version", c.pool.v)
        c._put_meta(PLANS_META, [plan_to_dict(p) for p in self.plans])
        write_atomic(c.paths.research_plan, plan_md)
        if c.tracker is not None:
            c.tracker.log_text_on_parent(plan_md, "research_plan.md")
            c.tracker.log_text_on_parent(plan_md, f"plans/research_plan_v{plan.version}.md")

    def record_promotion(self, summary: PromotionSummary) -> None:
        """A promotion's full scores onto its nodes; a change of winner moves the pool version."""
        c = self.committer
        before = c.pool.winner()
        for result in summary.results:
            node = c.pool.get(result.node_id)
            if node is None:  # rolled back meanwhile: nothing to fold the score into
                continue
            node.score_full, node.promoted_round = result.full, summary.round
            node.eval_s += result.seconds
            node.eval_cpu_s += result.cpu_s
            if result.error:
                node.artifacts["promotion_error"] = result.error[:2000]
            c.stats.promotions += 1
            c.stats.eval_s += result.seconds
            c.stats.eval_cpu_s += result.cpu_s
            c._put(node)
        promoted = {n.id: n for n in c.pool.nodes if n.promoted_round is not None}
        self.promotions.append(summary)
        c._put_meta(PROMOTIONS_META, [dataclasses.asdict(p) for p in self.promotions])
        after = c.pool.winner()
        if after is not None and (before is None or before.id != after.id):
            c.pool.v += 1
            c.history.record(c.pool.v, NEW_WINNER, after)
            c._put_meta("pool_version", c.pool.v)
        if after is not None:
            write_atomic(c.paths.best_program, after.code)
        if c.tracker is not None:
            metrics: dict[str, float] = {"promoted": len(summary.results)}
            if summary.spearman is not None:
                metrics["spearman_pilot_full"] = summary.spearman
            for r in summary.results:
                metrics[f"pilot.{r.node_id}"] = r.pilot
                if r.full is not None:
                    metrics[f"full.{r.node_id}"] = r.full
            if after is not None and after.score_full is not None:
                metrics["winner_full"] = after.score_full
            c.tracker.log_candidate(f"promotion-{summary.round}",
                                    {"round": summary.round, "promoted": ",".join(summary.promoted),
                                     "noisy": ",".join(summary.noisy) or "-"},
                                    metrics, {"promotion.md": promotion_md(summary, promoted)},
                                    tags={"kind": PROMOTION, "level": "full", "round": str(summary.round)},
                                    children=promotion_runs(summary.results, promoted, summary.round))
