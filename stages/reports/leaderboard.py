"""leaderboard.md, written by the commit stage: the top candidates with the stage of every score,
and for a gated run the best per plan branch, the promotions and the pool's history.

Every score says its level: a plain task ranks by `full`; a gated ML task ranks by `pilot`
(the search level) and shows the `full` score promotions gave. Held-out `final` scores are never
here: they live in report.md, written after the search.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evoforge.infra.nodes import SPECULATIVE, Node
from evoforge.stages.population.history import PoolUpdate
from evoforge.stages.population.pool import Pool
from evoforge.stages.rounds.branches import Plan
from evoforge.stages.rounds.plan_data import node_branch
from evoforge.stages.rounds.promotion import PromotionSummary
from evoforge.stages.tuning.param_study import TuningData


def score_text(node: Node) -> str:
    """A pool node's full score as shown to people, or its speculative prefix score."""
    if node.status == SPECULATIVE or node.score_full is None:
        partial = node.score_partial
        return f"{partial:.6g} (speculative, prefix)" if partial is not None else "-"
    return f"{node.score_full:.6g}"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _knobs(node: Node) -> str:
    shown = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in sorted(node.params.items()))
    return shown.replace("|", "/") or "-"


def _motivation(node: Node) -> str:
    return " ".join(node.motivation.split())[:90].replace("|", "/")


def _plain_rows(pool: Pool, top: int) -> list[str]:
    rows = ["| rank | node | score (full) | generation | parent | backend | motivation |",
            "|---|---|---|---|---|---|---|"]
    for rank, n in enumerate(pool.ranked()[:top], 1):
        rows.append(f"| {rank} | `{n.id}` | {score_text(n)} | {n.generation} | "
                    f"`{n.parent_id or '-'}` | {n.backend} | {_motivation(n)} |")
    return rows


def _staged_rows(nodes: Sequence[Node]) -> list[str]:
    rows = ["| rank | node | branch | pilot | full | knobs (best trial) | trials | parent | motivation |",
            "|---|---|---|---|---|---|---|---|---|"]
    for rank, n in enumerate(nodes, 1):
        rows.append(f"| {rank} | `{n.id}` | {node_branch(n) or '-'} | {_fmt(n.score_pilot)} | "
                    f"{_fmt(n.score_full)} | {_knobs(n)} | {TuningData.peek(n).trials_run} | "
                    f"`{n.parent_id or '-'}` | "
                    f"{_motivation(n)} |")
    return rows


def leaderboard_rows(pool: Pool, top: int = 20) -> list[dict[str, Any]]:
    """The top `top` candidates as plain rows (leaderboard.json, `leaderboard --json`, Prefect's
    table artifact): every score named by its level."""
    return [{"rank": rank, "node": n.id, "score": pool.value(n), "level": pool.level,
             "score_pilot": n.score_pilot, "score_full": n.score_full,
             "status": str(n.status), "branch": node_branch(n), "generation": n.generation,
             "parent": n.parent_id, "origin": n.origin, "backend": n.backend, "model": n.model,
             "params": dict(n.params), "motivation": " ".join(n.motivation.split())[:200]}
            for rank, n in enumerate(pool.ranked()[:top], 1)]


def leaderboard_md(task_name: str, pool: Pool, top: int = 20, plan: Plan | None = None,
                   history: Sequence[PoolUpdate] = (),
                   promotions: Sequence[PromotionSummary] = ()) -> str:
    """The leaderboard as markdown."""
    lines = [f"# Leaderboard: {task_name}", "",
             f"{len(pool.nodes)} evaluated candidates, pool version {pool.v}, "
             f"ranked by the `{pool.level}` score.", ""]
    if pool.level == "full":
        return "\n".join(lines + _plain_rows(pool, top)) + "\n"
    winner = pool.winner()
    if winner is not None:
        level = pool.winner_level(winner)
        lines += [f"Winner so far: `{winner.id}`, {level} score {_fmt(winner.score(level))}"
                  + (f" (pilot {_fmt(winner.score_pilot)})" if level == "full" else
                     " (no promotion yet: a pilot score)"), ""]
    lines += _staged_rows(pool.ranked()[:top])
    branches = {b.id: b for b in plan.slots} if plan is not None else {}
    best_of: dict[str, Node] = {}
    for node in pool.ranked():
        drawn_for = node_branch(node)
        if drawn_for is not None:
            best_of.setdefault(drawn_for, node)
    if best_of or branches:
        lines += ["", "## Best per branch", "", "| branch | slot | hypothesis | best node | pilot | full |",
                  "|---|---|---|---|---|---|"]
        for branch_id in sorted(set(best_of) | set(branches)):
            branch, node = branches.get(branch_id), best_of.get(branch_id)
            slot = str(branch.slot) if branch is not None else "retired"
            hypothesis = (branch.hypothesis if branch is not None else "").replace("|", "/")[:80]
            lines.append(f"| {branch_id} | {slot} | {hypothesis} | "
                         f"{'`' + node.id + '`' if node else '-'} | "
                         f"{_fmt(node.score_pilot if node else None)} | "
                         f"{_fmt(node.score_full if node else None)} |")
    if promotions:
        lines += ["", "## Promotions (pilot → full)", "",
                  "| round | promoted | rank correlation (Spearman, all promoted) | consistent | noisy |",
                  "|---|---|---|---|---|"]
        for p in promotions:
            lines.append(f"| {p.round} | {len(p.promoted)} | {_fmt(p.spearman)} | "
                         f"{', '.join(p.consistent) or '-'} | {', '.join(p.noisy) or '-'} |")
    if history:
        lines += ["", "## History (pool versions)", "", "| version | event | node | pilot | full |",
                  "|---|---|---|---|---|"]
        for update in history[-30:]:
            n = update.node
            lines.append(f"| {update.v} | {update.kind} | `{n.id}` | {_fmt(n.score_pilot)} | "
                         f"{_fmt(n.score_full)} |")
    return "\n".join(lines) + "\n"
