"""Run counters and honest cost accounting, rebuilt from the node database on resume."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.infra import failure_reasons as why
from evoforge.infra.nodes import Node, Status
from evoforge.stages.analysis_data import BY_LLM, BY_OFFLINE, BY_SUMMARY, AnalysisData
from evoforge.stages.population.claims import claims_of
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.reflect_data import ReflectData, ReflectOutcome
from evoforge.stages.tuning.param_study import TuningData
from evoforge.stages.verify_data import ClaimsData

_FAILED_HERE = {"research": why.NO_EDIT, "guard": why.GUARD, "gate": why.EVALUATION,
                "rollout": why.EVALUATION, "generate": why.EVALUATION}


def reason_of(node: Node) -> str | None:
    """Why a failed, rejected or stale node ended so (None for any other): the reason recorded on
    it, or, for a node recorded without one (by an earlier evoforge, or a plug-in stage that sets
    none), the bucket its status and stage point to."""
    if node.status not in (Status.FAILED, Status.REJECTED, Status.STALE):
        return None
    if node.reason:
        return node.reason
    if node.status == Status.STALE:
        return why.STALE
    if node.status == Status.REJECTED:
        return why.GUARD if node.failed_stage == "gate" else why.DUPLICATE
    if node.failed_stage == "research" and (node.error or "").startswith("LLM call failed"):
        return why.SERVER_ERROR
    if node.was_evaluated:
        return why.EVALUATION
    return _FAILED_HERE.get(node.failed_stage or "", why.INTERNAL)


@dataclass
class RunStats:
    """What the run has done and spent so far, over every session of the run."""

    proposals: int = 0  # research answers received (used or not)
    evaluations: int = 0  # evaluations that ran (successful, failed, pruned or rolled back)
    evaluated_ok: int = 0  # accepted: fully evaluated and in the pool
    failed: int = 0  # failed nodes, at any stage
    failed_research: int = 0  # the LLM call or its answer failed
    failed_evaluation: int = 0  # the candidate failed its evaluation
    failed_guard: int = 0  # stopped by the static check before any evaluation ran
    failed_internal: int = 0  # an evoforge step failed (reason INTERNAL: a bug, see run.log)
    duplicates: int = 0  # rejected before evaluation as a (near-)duplicate, repeats included
    repeats: int = 0  # of those, repeats served an earlier evaluation's result (not evaluated)
    dropped_stale: int = 0  # dropped by the staleness policy or the reflection
    reflected: int = 0
    patched: int = 0
    pruned: int = 0  # evaluation stopped on the validation prefix
    rolled_back: int = 0
    speculative_released: int = 0
    confirmed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    llm_s: float = 0.0
    eval_s: float = 0.0
    eval_cpu_s: float = 0.0  # CPU seconds of every evaluation: candidates, trials, promotions
    trials: int = 0  # Optuna trials evaluated (beyond each structure's own evaluation)
    promotions: int = 0  # candidates re-evaluated at `full` by a promotion
    wasted_llm_s: float = 0.0  # LLM time of items later dropped or rolled back
    wasted_eval_s: float = 0.0  # evaluation time of rolled-back nodes
    patched_llm_s: float = 0.0  # LLM time (research + reflection) of items that were patched
    analysed_llm: int = 0  # candidates whose report an LLM endpoint wrote (the simulator included)
    analysed_offline: int = 0  # candidates whose report the offline analyzer wrote (no LLM)
    analysed_summary: int = 0  # candidates given the deterministic summary (the LLM was busy)
    verify_evals: int = 0  # counterfactual evaluations of the Analyzer's claims (stages/verify.py)
    verify_eval_s: float = 0.0  # their evaluator seconds
    # the Analyzer's claims: made, and by verdict (unchecked, confirmed, refuted, inconclusive)
    claims: dict[str, int] = field(default_factory=dict)
    # every failed, rejected or stale node under its reason (infra/failure_reasons.py)
    failures_by_reason: dict[str, int] = field(default_factory=dict)

    def count(self, node: Node) -> None:
        """Add one finished node; the seed is an evaluation but not a proposal."""
        self.proposals += node.origin != "seed"
        self.tokens_in += node.tokens_in
        self.tokens_out += node.tokens_out
        self.llm_s += node.llm_s
        self.eval_s += node.eval_s
        self.eval_cpu_s += node.eval_cpu_s
        self.trials += TuningData.peek(node).trials_run
        self.evaluations += node.was_evaluated
        reflected = ReflectData.peek(node).outcome
        self.reflected += reflected is not None and reflected.decided
        analysed_by = AnalysisData.peek(node).by
        self.analysed_llm += analysed_by == BY_LLM
        self.analysed_offline += analysed_by == BY_OFFLINE
        self.analysed_summary += analysed_by == BY_SUMMARY
        self._count_claims(claims_of(node))
        if reflected == ReflectOutcome.PATCHED:
            self.patched += 1
            self.patched_llm_s += node.llm_s
        reason = reason_of(node)
        if reason is not None:
            self.failures_by_reason[reason] = self.failures_by_reason.get(reason, 0) + 1
        match node.status:
            case Status.EVALUATED:
                self.evaluated_ok += 1
            case Status.FAILED:
                self.failed += 1
                if node.failed_stage == "research":
                    self.failed_research += 1
                elif node.was_evaluated:
                    self.failed_evaluation += 1
                elif node.failed_stage == "guard":
                    self.failed_guard += 1
                self.failed_internal += reason == why.INTERNAL
            case Status.REJECTED:
                self.failed += 1
                self.duplicates += reason == why.DUPLICATE  # (a gate's rejection is not one)
                self.repeats += RepeatData.peek(node).repeat_of is not None
            case Status.STALE:
                self.dropped_stale += 1
                self.wasted_llm_s += node.llm_s
            case Status.PRUNED:
                self.pruned += 1
            case Status.ROLLED_BACK:
                self.rolled_back += 1
                self.wasted_llm_s += node.llm_s
                self.wasted_eval_s += node.eval_s

    def _count_claims(self, data: ClaimsData) -> None:
        """Add one node's claims and what checking them spent."""
        self.verify_evals += data.evaluations
        self.verify_eval_s += data.eval_s
        for claim in data.claims:
            for key in ("made", claim.get("verdict", "unchecked")):
                self.claims[key] = self.claims.get(key, 0) + 1

    def recount_dropped(self, node: Node) -> None:
        """An accepted node left the pool as stale (a rollback upstream, under `guarded`): it
        counts as dropped from now on, as a rebuild from the database would count it."""
        self.evaluated_ok -= 1
        self.dropped_stale += 1
        self.failures_by_reason[why.STALE] = self.failures_by_reason.get(why.STALE, 0) + 1
        self.wasted_llm_s += node.llm_s

    @classmethod
    def rebuild(cls, nodes: list[Node], held_out_cost: tuple[float, float] = (0.0, 0.0)) -> RunStats:
        """The counters of a resumed run, from its nodes and the (seconds, CPU seconds) of its
        held-out evaluations."""
        stats = cls()
        for node in nodes:
            if node.status.terminal:
                stats.count(node)
                stats.promotions += PromotionData.peek(node).round is not None
                stats.speculative_released += node.speculative_at is not None
                stats.confirmed += node.speculative_at is not None and node.status == Status.EVALUATED
        stats.eval_s += held_out_cost[0]
        stats.eval_cpu_s += held_out_cost[1]
        return stats
