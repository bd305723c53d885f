"""Readable snapshots of a run, written by the commit stage: status.json and leaderboard.md."""

from __future__ import annotations

from typing import Any

from evoforge.infra.nodes import SPECULATIVE, Node
from evoforge.stages.pool import Pool
from evoforge.stages.stats import RunStats


def status_dict(stats: RunStats, pool: Pool, wall_s: float, extra: dict[str, Any]) -> dict[str, Any]:
    """The status document `evoforge status --json` prints."""
    best, confirmed = pool.best, pool.best_confirmed()
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
        "best_score": confirmed.score_full if confirmed else None,  # fully evaluated only
        "best_node": confirmed.id if confirmed else None,
        "speculative_best": best.id if best is not None and best.status == SPECULATIVE else None,
        "pool_version": pool.v,
        "wall_s": round(wall_s, 3),
        "candidates_per_min": round(stats.evaluations / minutes, 3) if minutes else 0.0,
        "accepted_per_min": round(stats.evaluated_ok / minutes, 3) if minutes else 0.0,
        "proposals_per_min": round(stats.proposals / minutes, 3) if minutes else 0.0,
        "dropped_stale": stats.dropped_stale,
        "reflected": stats.reflected,
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
        **extra,
    }


def score_text(node: Node) -> str:
    """A pool node's score as shown to people: the full score, or a speculative prefix score."""
    if node.status == SPECULATIVE or node.score_full is None:
        partial = node.score_partial
        return f"{partial:.6g} (speculative, prefix)" if partial is not None else "-"
    return f"{node.score_full:.6g}"


def _row(rank: int, node: Node) -> str:
    motivation = " ".join(node.motivation.split())[:90].replace("|", "/")
    return (
        f"| {rank} | `{node.id}` | {score_text(node)} | {node.generation} | "
        f"`{node.parent_id or '-'}` | {node.backend} | {motivation} |"
    )


def leaderboard_md(task_name: str, pool: Pool, top: int = 20) -> str:
    """The top evaluated candidates as a markdown table."""
    lines = [
        f"# Leaderboard: {task_name}",
        "",
        f"{len(pool.nodes)} evaluated candidates, pool version {pool.v}.",
        "",
        "| rank | node | score | generation | parent | backend | motivation |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_row(i + 1, n) for i, n in enumerate(pool.ranked()[:top])]
    return "\n".join(lines) + "\n"
