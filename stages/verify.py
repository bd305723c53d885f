"""Verify: the Analyzer's causal claims put to the test by counterfactual runs.

The verify stage plug-in follows analyze on the main line. For each claim the Analyzer made about
a candidate's numbered hunks (`## Claims`, infra/claims_format.py) it evaluates, on the run's
evaluation slots and at the level the child was scored at with the child's knob values, the child
with the credited hunk put back as in the parent (when that does not run, the parent with only
that hunk applied), and compares: a claim ends confirmed, refuted or inconclusive
(stages/verdicts.py), with the scores, the effect, its standard error and the runs per side on
the node (stages/verify_data.py). The child is rerun once first: a rerun that differs from its
score means a noisy evaluator, and then each side gets `analyze.verify_repeats` runs (the child's
own score, which the claim was read from, is never one of them: it would bias the test toward
the claim).

What it may spend is `analyze.verify_share` of the run's candidate evaluations (stages/
verify_ledger.py), the claims crediting the largest effect first; the others stay unchecked. A
check is held against `budget.max_evals` for its worst case before it starts (stages/pipeline/
extra_evals.py) and is not started when the budget has no room for that.
Counterfactual runs are Prefect task runs named `verify-<node>-<k>`, count as the run's
evaluations (`verify_evals` in status.json) and never become nodes. The ledger lives in the
stage: a resumed run starts a new account (its share holds from there on).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from evoforge.cognition.entries import INCONCLUSIVE
from evoforge.infra.claims_format import BETTER, Claim, parse_claims
from evoforge.infra.config import RunConfig
from evoforge.infra.hunks import hunks, only, revert
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.evaluation.job import EvalRequest, EvaluationRunner
from evoforge.stages.pipeline.requests import request_for
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.verdicts import differs, judge
from evoforge.stages.verify_data import ONLY, REVERT, ClaimsData, claim_record
from evoforge.stages.verify_ledger import Ledger

VERIFY_RUN = "verify-{node}-{k}"


class Verify(Stage):
    """Tests the Analyzer's claims on each candidate with counterfactual runs (`analyze.verify_share`)."""

    name = "verify"
    workers_like = "engineer"  # its evaluations share the engineer's slots
    default_workers = 2
    max_workers = 4
    data = ClaimsData

    def __init__(self) -> None:
        self.ledger: Ledger | None = None
        self.noisy: bool | None = None  # what the first rerun of a child showed about the evaluator

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.analyze.enabled and cfg.analyze.verify_share > 0

    def skips(self, item: Item, ctx: RunView) -> bool:
        return item.node is None or not item.node.was_evaluated

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        assert item.node is not None
        ledger = self.ledger_for(ctx)
        ledger.count_candidate()
        node = item.node.copy()
        lines = AnalysisData.peek(node).claims
        if not lines:
            return StageResult(node)
        parsed = parse_claims("\n".join(lines), ctx.task.direction != "minimize")
        data = ClaimsData.of(node)
        data.unparsed = list(parsed.unparsed)
        ranked = sorted(parsed.claims, key=lambda c: -(c.magnitude or 0.0))
        records = []
        for i, claim in enumerate(ranked):
            if i >= ctx.config.analyze.verify_max_claims:
                records.append(claim_record(claim))
                continue
            records.append(await self._check(claim, node, item.parent, ctx, ledger, data))
        data.claims = records
        return StageResult(node)

    def ledger_for(self, ctx: RunView) -> Ledger:
        """The run's verification account (made on first use)."""
        if self.ledger is None:
            self.ledger = Ledger(ctx.config.analyze.verify_share)
        return self.ledger

    def cost(self, ctx: RunView) -> int:
        """What checking one claim is expected to cost in evaluations."""
        repeats = ctx.config.analyze.verify_repeats
        return 2 * repeats if self.noisy else 2  # unknown: hope for a deterministic evaluator

    def worst(self, ctx: RunView) -> int:
        """The most checking one claim can cost: the child's rerun, a revert that does not run, and
        `verify_repeats` runs a side of the other form (one a side for a deterministic evaluator)."""
        repeats = 1 if self.noisy is False else ctx.config.analyze.verify_repeats
        return 2 * repeats + 2

    async def _check(self, claim: Claim, node: Node, parent: Node | None, ctx: RunView, ledger: Ledger,
                     data: ClaimsData) -> dict[str, Any]:
        """The claim's record: checked when the ledger admits it and it can be checked."""
        level = ctx.task.search_level
        child_score = node.score(level) if node.status == EVALUATED else None
        if child_score is None or parent is None or parent.id != node.parent_id:
            return claim_record(claim, error="not checkable: no score at the search level or no parent")
        count = len(hunks(parent.code, node.code))
        if not 1 <= claim.hunk <= count:
            return claim_record(claim, error=f"the change has no hunk {claim.hunk} ({count} hunks)")
        reference = parent.score(level)
        scale = max(abs(child_score), abs(reference or 0.0), 1e-12)
        credited = claim.magnitude if claim.magnitude is not None else abs(child_score - (reference or 0.0))
        reserved, held = self.cost(ctx), self.worst(ctx)
        if not ledger.admit(credited / scale, reserved, fits=held <= ctx.extra_evals.room()):
            return claim_record(claim)
        ctx.extra_evals.hold(held)  # against the run's budget at once: no candidate is issued into it
        runs = _Runs(node, request_for(node, ctx, node.params or None).at_level(level), ctx.evaluations,
                     data)
        try:
            return await self._counterfactual(claim, node, parent, child_score, runs, ctx)
        finally:
            ledger.settle(reserved, runs.spent)
            ctx.extra_evals.settle(held, runs.spent)

    async def _counterfactual(self, claim: Claim, node: Node, parent: Node, child_score: float,
                              runs: _Runs, ctx: RunView) -> dict[str, Any]:
        """Rerun the child, then run the counterfactual (each side `verify_repeats` times when noisy)."""
        rerun, error = await runs.one(node.code)
        if rerun is None:
            return claim_record(claim, INCONCLUSIVE, error=f"the child's rerun failed: {error}")
        noisy = differs(rerun, child_score)
        self.noisy = noisy if self.noisy is None else self.noisy or noisy
        runs.data.noisy = noisy
        extra = ctx.config.analyze.verify_repeats if noisy else 1
        # the child's own score is left out of the comparison: it is the one the claim was read from
        form, with_hunk, without = REVERT, [rerun], []
        reverted = revert(parent.code, node.code, claim.hunk)
        first, error = await runs.one(reverted)
        if first is not None:
            without = [first, *await runs.many(reverted, extra - 1)]
            with_hunk += await runs.many(node.code, extra - 1)
        else:  # the other form: the parent with only the hunk, against the parent (the child's knobs)
            applied = only(parent.code, node.code, claim.hunk)
            alone, other = await runs.one(applied)
            if alone is None:
                return claim_record(claim, INCONCLUSIVE,
                                    error=f"neither counterfactual ran: {error}; {other}")
            form, with_hunk = ONLY, [alone, *await runs.many(applied, extra - 1)]
            without = await runs.many(parent.code, extra)
        if not without or (noisy and min(len(with_hunk), len(without)) < 2):
            return claim_record(claim, INCONCLUSIVE, error="too few runs finished", form=form)
        judged = judge(with_hunk, without, better=claim.direction == BETTER,
                       maximize=ctx.task.direction != "minimize", magnitude=claim.magnitude, noisy=noisy)
        return claim_record(claim, judged.verdict, form=form, with_scores=with_hunk, without_scores=without,
                       effect=judged.effect, se=judged.se, n=judged.n)


@dataclass
class _Runs:
    """The counterfactual evaluations of one node: named `verify-<node>-<k>`, counted on its data."""

    node: Node
    request: EvalRequest  # the child's evaluation job: the code is swapped per run
    runner: EvaluationRunner  # the run's evaluation slots
    data: ClaimsData
    spent: int = 0

    async def one(self, code: str) -> tuple[float | None, str | None]:
        """One evaluation of `code`: its score, or None and the error."""
        self.spent += 1
        self.data.evaluations += 1
        name = VERIFY_RUN.format(node=self.node.id, k=self.data.evaluations)
        job = replace(self.request, code=code).with_name(name)
        outcome = (await self.runner.run(job, None)).outcome
        self.data.eval_s += outcome.seconds
        self.node.eval_cpu_s += outcome.cpu_s or 0.0
        if outcome.ok and outcome.score is not None:
            return outcome.score, None
        return None, outcome.error or "no score"

    async def many(self, code: str, n: int) -> list[float]:
        """`n` evaluations of `code` at once: the scores of those that ran."""
        results = await asyncio.gather(*(self.one(code) for _ in range(max(0, n))))
        return [score for score, _ in results if score is not None]

