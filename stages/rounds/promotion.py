"""Promotion (ml-evolve's gated gate): every K rounds the top-K candidates by pilot score are
re-evaluated on the full training data with their best knob values, so consistent leaders
are confirmed and pilot-lucky ones are exposed.

`promotion_candidates` picks who goes up; each candidate travels as an item of the `promote`
stage (stages/promote.py, a `PromotionTicket` in `Item.owned`), whose worker runs its `full`
evaluation with `promote` on the run's evaluation runner (the shared slots; Prefect task runs
`promote-<node>`). Only the head applies each result to its pooled node (rescored in place) and,
once the round's last item is in, `summarize` compares the two levels over every candidate
promoted so far: Spearman's rank correlation of pilot and full, and which candidates held their
rank (consistent) or fell (noisy). Example::

    spearman([1, 2, 3], [10, 30, 20])  # 0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import Context
from dataclasses import dataclass

from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.evaluation.job import EvalRequest, EvaluationRunner
from evoforge.stages.population.pool import Pool
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.rounds.plan_data import node_branch

PROMOTE_RUN = "promote-{node}"
PROMOTE = "promote"  # the stage's name, and its key in a promotion item's `owned`


@dataclass(frozen=True)
class Promoted:
    """One candidate's full-level evaluation."""

    node_id: str
    pilot: float
    full: float | None
    error: str | None
    seconds: float
    cpu_s: float


@dataclass(frozen=True)
class PromotionSummary:
    """What one promotion round did and what it showed about the pilot level."""

    round: int
    promoted: tuple[str, ...]  # promoted in this round
    results: tuple[Promoted, ...]
    spearman: float | None  # pilot vs full over every candidate promoted so far
    consistent: tuple[str, ...]
    noisy: tuple[str, ...]


@dataclass(frozen=True)
class PromotionTicket:
    """What a promotion item carries (`Item.owned[PROMOTE]`): its round, its place among the
    round's `size` items, the context its evaluation runs in (the round's Prefect subflow, so
    that its task run `promote-<node>` is that subflow's), and, once the promote stage ran, the
    candidate's `full` result."""

    round: int
    index: int
    size: int
    context: Context | None = None
    result: Promoted | None = None


def promotion_candidates(pool: Pool, k: int) -> list[Node]:
    """The top `k` candidates by the pool's (pilot) ranking that no promotion scored yet."""
    out = []
    for node in pool.ranked():
        if len(out) >= k:
            break
        if (node.status == EVALUATED and node.score_full is None
                and PromotionData.peek(node).round is None):
            out.append(node)
    return out


async def promote(node: Node, runner: EvaluationRunner, request: EvalRequest) -> Promoted:
    """Evaluate `node` at `full` with its best knob values (`request`: its evaluation job at the
    search level) on `runner` (the run's slots queue it)."""
    request = request.with_name(PROMOTE_RUN.format(node=node.id)).at_level("full")
    outcome = (await runner.run(request, None)).outcome
    assert node.score_pilot is not None
    return Promoted(node.id, node.score_pilot, outcome.score if outcome.ok else None,
                    outcome.error, outcome.seconds, outcome.cpu_s or 0.0)


def _ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation; None with fewer than 3 pairs or a constant side."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / (vx * vy) ** 0.5 if vx > 0 and vy > 0 else None


def summarize(round_no: int, results: Sequence[Promoted], promoted: Sequence[Node],
              maximize: bool) -> PromotionSummary:
    """This round's results, judged over `promoted` (every node with pilot and full scores).

    A node is noisy when its full-level rank is more than max(1, n // 4) places below its pilot
    rank among the n promoted nodes; the others are consistent."""
    scored = [n for n in promoted if n.score_pilot is not None and n.score_full is not None]
    sign = 1.0 if maximize else -1.0
    pilots = [sign * n.score_pilot for n in scored]  # type: ignore[operator]
    fulls = [sign * n.score_full for n in scored]  # type: ignore[operator]
    rho = spearman(pilots, fulls)
    slack = max(1, len(scored) // 4)
    pilot_rank = {n.id: r for n, r in zip(scored, _ranks([-v for v in pilots]), strict=True)}
    full_rank = {n.id: r for n, r in zip(scored, _ranks([-v for v in fulls]), strict=True)}
    noisy = tuple(n.id for n in scored if full_rank[n.id] - pilot_rank[n.id] > slack)
    consistent = tuple(n.id for n in scored if n.id not in noisy)
    return PromotionSummary(round_no, tuple(r.node_id for r in results), tuple(results), rho,
                            consistent, noisy)


def promotion_md(summary: PromotionSummary, nodes: dict[str, Node]) -> str:
    """One promotion round as markdown (the MLflow artifact of its run)."""
    lines = [f"# Promotion round {summary.round}", "",
             f"Spearman rank correlation, pilot vs full, over all promoted: "
             f"{'-' if summary.spearman is None else f'{summary.spearman:.3f}'}", "",
             "| node | branch | pilot | full | verdict |", "|---|---|---|---|---|"]
    for r in summary.results:
        node = nodes.get(r.node_id)
        verdict = "noisy" if r.node_id in summary.noisy else "consistent" if r.full is not None else \
            f"failed at full: {(r.error or '')[:80]}"
        full = "-" if r.full is None else f"{r.full:.6g}"
        branch = node_branch(node) if node else "-"
        lines.append(f"| `{r.node_id}` | {branch} | {r.pilot:.6g} | {full} | {verdict} |")
    return "\n".join(lines) + "\n"
