"""The round jobs' records: the research plans and the promotions of a run, as the head applied
them (flows/head.py), stored as run metadata and restored from it on resume."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from evoforge.stages.rounds.branches import Branch, KillCriteria, Plan, SlotDecision
from evoforge.stages.rounds.promotion import Promoted, PromotionSummary

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


@dataclass
class Rounds:
    """Plans and promotions of the run, oldest first."""

    plans: list[Plan] = field(default_factory=list)
    promotions: list[PromotionSummary] = field(default_factory=list)

    @property
    def plan(self) -> Plan | None:
        """The current plan (None: the run has no plan agent)."""
        return self.plans[-1] if self.plans else None

    def plans_state(self) -> list[dict[str, Any]]:
        return [plan_to_dict(p) for p in self.plans]

    def promotions_state(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(p) for p in self.promotions]

    @classmethod
    def restore(cls, plans: list[dict[str, Any]], promotions: list[dict[str, Any]]) -> Rounds:
        """The records as the run metadata has them (resume)."""
        return cls([plan_from_dict(p) for p in plans], [summary_from_dict(p) for p in promotions])
