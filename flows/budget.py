"""When a run may start another candidate and when it is done."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from evoforge.infra.config import BudgetConfig
from evoforge.infra.llm.spending import Spending
from evoforge.stages.pipeline.extra_evals import ExtraEvaluations
from evoforge.stages.population.stats import RunStats


@dataclass
class Budget:
    """Evaluations, proposals, tokens and wall time; `in_flight` is the engine's count of issued,
    unfinished items (the engine owns it: passed in, never kept here)."""

    cfg: BudgetConfig
    stats: RunStats
    started: float = field(default_factory=time.monotonic)
    spending: Spending | None = None  # the LLM calls' dollars, held to cfg.max_cost_usd
    extra: ExtraEvaluations | None = None  # evaluations stages committed to beyond the candidates'
    resumed_extra: int = field(init=False)  # the counted nodes' extra evaluations at the start

    def __post_init__(self) -> None:
        self.resumed_extra = self.stats.verify_evals

    def _wall_over(self) -> bool:
        return self.cfg.max_wall_s is not None and time.monotonic() - self.started >= self.cfg.max_wall_s

    def _tokens_over(self) -> bool:
        used = self.stats.tokens_in + self.stats.tokens_out  # the nodes' calls
        if self.spending is not None:  # every call the servers counted, over the run's sessions
            used = max(used, self.spending.tokens_in + self.spending.tokens_out)
        return self.cfg.max_tokens is not None and used >= self.cfg.max_tokens

    @property
    def evaluations(self) -> int:
        """Evaluations spent against `max_evals`: the candidates', and the counterfactual runs that
        tested the Analyzer's claims (stages/verify.py), counted from when the stage committed to
        them (held for its worst case) rather than when their node finishes."""
        committed = self.resumed_extra + (self.extra.committed if self.extra is not None else 0)
        return self.stats.evaluations + max(self.stats.verify_evals, committed)

    def stop_reason(self) -> str | None:
        """Why the run is finished, or None while budget remains."""
        if self.evaluations >= self.cfg.max_evals:
            return f"max_evals reached ({self.evaluations})"
        if self.stats.proposals >= self.cfg.proposal_cap():
            return f"proposal cap reached ({self.stats.proposals} proposals)"
        if self._tokens_over():
            return "max_tokens reached"
        if self._wall_over():
            return "max_wall_s reached"
        if self.spending is not None and self.spending.exhausted:
            return f"max_cost_usd reached (${self.spending.spent_usd:.4f})"
        return None

    def can_issue(self, in_flight: int) -> bool:
        """True when one more item fits the budget, counting the ones in flight as spent."""
        return self.remaining(in_flight) > 0

    def remaining(self, in_flight: int) -> int:
        """How many more items may be issued now, with `in_flight` issued and unfinished."""
        if self.stop_reason() is not None:
            return 0
        return max(0, min(self.cfg.max_evals - self.evaluations,
                          self.cfg.proposal_cap() - self.stats.proposals) - in_flight)
