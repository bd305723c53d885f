"""status.json, the run's readable snapshot, written by the commit stage (leaderboard.md: leaderboard.py)."""

from __future__ import annotations

from typing import Any

from evoforge.infra.failure_reasons import ALL
from evoforge.infra.nodes import SPECULATIVE
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.stats import RunStats


def by_reason(counts: dict[str, int]) -> dict[str, int]:
    """The failures by reason, largest bucket first (ties in the documented order).

    >>> by_reason({"stale": 1, "no edit found": 3, "guard": 1})
    {'no edit found': 3, 'guard': 1, 'stale': 1}
    """
    order = {reason: i for i, reason in enumerate(ALL)}
    return dict(sorted(((r, n) for r, n in counts.items() if n),
                       key=lambda item: (-item[1], order.get(item[0], len(order)), item[0])))


def claims_counts(stats: RunStats) -> dict[str, int]:
    """The Analyzer's claims: made, checked, each verdict, and the counterfactual evaluations spent.

    >>> made = {"made": 3, "confirmed": 1, "refuted": 1, "unchecked": 1}
    >>> claims_counts(RunStats(verify_evals=4, claims=made))
    {'made': 3, 'checked': 2, 'confirmed': 1, 'refuted': 1, 'inconclusive': 0, 'verify_evals': 4}
    """
    got = stats.claims
    verdicts = {v: got.get(v, 0) for v in ("confirmed", "refuted", "inconclusive")}
    return {"made": got.get("made", 0), "checked": sum(verdicts.values()), **verdicts,
            "verify_evals": stats.verify_evals}


def status_dict(stats: RunStats, pool: Pool, wall_s: float, extra: dict[str, Any]) -> dict[str, Any]:
    """The status document `evoforge status --json` prints."""
    best, confirmed = pool.best, pool.winner()
    minutes = wall_s / 60 if wall_s > 0 else 0
    return {
        "nodes_evaluated": stats.evaluated_ok,
        "nodes_failed": stats.failed,
        "evaluations": stats.evaluations,
        "proposals": stats.proposals,
        "failed_research": stats.failed_research,
        "failed_evaluation": stats.failed_evaluation,
        "failed_guard": stats.failed_guard,
        "failed_internal": stats.failed_internal,
        "duplicates_rejected": stats.duplicates,
        "failures_by_reason": by_reason(stats.failures_by_reason),  # every failed node's one reason
        "repeats": stats.repeats,  # served from earlier evaluations: not evaluations
        "best_score": confirmed.score(pool.winner_level(confirmed)) if confirmed else None,
        "best_level": pool.winner_level(confirmed) if confirmed else None,  # the score's level
        "best_node": confirmed.id if confirmed else None,
        "search_level": pool.level,
        "speculative_best": best.id if best is not None and best.status == SPECULATIVE else None,
        "pool_version": pool.v,
        "wall_s": round(wall_s, 3),
        "candidates_per_min": round(stats.evaluations / minutes, 3) if minutes else 0.0,
        "accepted_per_min": round(stats.evaluated_ok / minutes, 3) if minutes else 0.0,
        "proposals_per_min": round(stats.proposals / minutes, 3) if minutes else 0.0,
        "dropped_stale": stats.dropped_stale,
        "reflected": stats.reflected,
        "analysed_llm": stats.analysed_llm,  # reports the LLM wrote
        "analysed_offline": stats.analysed_offline,  # the offline analyzer: no LLM
        "analysed_summary": stats.analysed_summary,  # deterministic summaries: the LLM was busy
        "patched": stats.patched,
        "pruned": stats.pruned,
        "speculative_released": stats.speculative_released,
        "confirmed": stats.confirmed,
        "rolled_back": stats.rolled_back,
        "wasted_llm_s": round(stats.wasted_llm_s, 3),
        "wasted_eval_s": round(stats.wasted_eval_s, 3),
        "patched_llm_s": round(stats.patched_llm_s, 3),
        "tokens_in": stats.tokens_in,
        "tokens_out": stats.tokens_out,
        "llm_s": round(stats.llm_s, 3),
        "eval_s": round(stats.eval_s, 3),
        "eval_cpu_s": round(stats.eval_cpu_s, 3),
        "trials": stats.trials,
        "promotions": stats.promotions,
        "verify_evals": stats.verify_evals,  # counterfactual runs testing the Analyzer's claims
        "claims": claims_counts(stats),
        **extra,
    }

