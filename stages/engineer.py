"""Engineer: check a proposed candidate, then evaluate it in the sandbox (case by case, with
speculative completion, when the task exposes validation cases).

The engineer stage plug-in. Its door is the staleness policy (stages/population/staleness.py): an item that
is too old is dropped (to the commit) or sent to the reflect stage before any evaluation runs; a
candidate back from a repair (stages/debug.py) passes straight in. Before the evaluation, the
guardrails (stages/evaluation/guardrails.py) check the code statically, and the task's quick test, when it
declares one and `guard.quick_test` is on, runs first in the same evaluation job. A program the
run has evaluated already, or is evaluating, is not evaluated again: it is served that result
(stages/population/repeats.py).
The evaluation itself is a job handed to the run's evaluation runner (a Prefect task on the
flow's task runner, by default), so the stage never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import time

from evoforge.evaluators.cases import CaseOutcome
from evoforge.evaluators.evaluation import EvalOutcome
from evoforge.infra import failure_reasons
from evoforge.infra.nodes import EVALUATED, FAILED, PRUNED, REJECTED, SPECULATIVE, STALE, Node
from evoforge.stages.debug import RepairData
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.evaluation.guardrails import GUARD, QUICK_TEST_PREFIX, static_violation
from evoforge.stages.evaluation.job import EvalReport
from evoforge.stages.pipeline.requests import request_for
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Admission, Stage, StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.population.novelty import EmbeddingSimilarity, novelty_rejection
from evoforge.stages.population.repeats import EvalKey, knob_space, serve_repeat
from evoforge.stages.population.staleness import DROP, REFLECT, decide
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.tuning.param_space import ParamSpace, SpaceError, hardcoded_values, parse_space
from evoforge.stages.tuning.param_study import TrialOutcome, stored_default, study_name_of


class Engineer(Stage):
    """Evaluates candidates in the sandbox, `engine.workers.engineer` at a time."""

    name = "engineer"
    evaluates = True  # its workers are the run's evaluation slots
    runs_on_seed = True
    default_workers, max_workers = 2, 8  # evaluations at once (engine.workers.engineer)


    def admit(self, item: Item, ctx: RunView) -> Admission:
        """The staleness policy, unless the item has just been through reflection or a repair."""
        node = item.node
        assert node is not None
        if item.reflected or RepairData.peek(node).attempts:
            return Admission()
        decision = decide(item, ctx.pool.v, ctx.history, ctx.config.staleness)
        noted = node.copy()
        noted.owned[StalenessData.owner] = StalenessData(staleness=item.staleness(ctx.pool.v),
                                                         note=decision.reason)
        if decision.action == DROP:
            noted.status, noted.reason = STALE, failure_reasons.STALE
            return Admission(to=COMMIT, node=noted)
        if decision.action == REFLECT:
            return Admission(to="reflect", node=noted)
        return Admission(node=noted)

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        return await engineer(item, ctx)


def novelty_similarity(ctx: RunView) -> EmbeddingSimilarity | None:
    """The similarity `search.novelty_backend` names (None: the default MinHash)."""
    if ctx.config.search.novelty_backend == "embedding" and ctx.cognition is not None:
        return EmbeddingSimilarity(ctx.cognition.embedder)
    return None


async def engineer(item: Item, ctx: RunView) -> StageResult:
    """Evaluate the item's candidate; its node comes back with scores, or the reason it failed.
    A program evaluated before (or being evaluated) is served that result instead (a repeat)."""
    assert item.node is not None
    node = item.node.copy()
    violation = static_violation(node.code, ctx.task)
    if violation is not None:  # no sandbox run, so no evaluation is counted
        node.status, node.failed_stage, node.error = FAILED, GUARD, str(violation)
        node.reason = failure_reasons.GUARD
        return StageResult(node)
    try:
        space = knob_space(node.code, ctx.task)
    except SpaceError as exc:  # a malformed knob declaration: no sandbox run
        node.status, node.failed_stage, node.error = FAILED, GUARD, f"parameter space: {exc}"
        node.reason = failure_reasons.GUARD
        return StageResult(node)
    EngineerData.of(node).hardcoded = (hardcoded_values(node.code, owned_knobs(item))
                                       if ctx.task.is_python else [])
    node.params = space.defaults()
    level = ctx.task.search_level
    key = EvalKey.of(node.code, level, node.params)
    # a seed always runs; so does a resumed node whose own study holds its defaults' evaluation
    # (a copy of it proposed meanwhile must not take its place: its cut-off study goes on)
    earlier = await earlier_defaults(node, ctx) if space else None
    own = node.origin == "seed" or earlier is not None
    served = None if own else await ctx.repeats.claim(key)
    if served is not None:
        return StageResult(serve_repeat(node, served))
    settled = None
    try:
        settled = await _evaluate_new(item, node, space, ctx, earlier)
    finally:  # recorded when complete; otherwise (pruned, rejected, cancelled) the key is free
        ctx.repeats.finish(key, settled, level)
    return StageResult(settled)


async def _evaluate_new(item: Item, node: Node, space: ParamSpace, ctx: RunView,
                        earlier: TrialOutcome | None = None) -> Node:
    """The evaluation of a program no earlier node evaluated (unless too like a pool member)."""
    reason = None if node.origin == "seed" else (  # a failed seed is evaluated again on a rerun
        novelty_rejection(node.code, ctx.pool, ctx.config.search, novelty_similarity(ctx)))
    if reason is not None:
        node.status, node.failed_stage, node.reason = REJECTED, "engineer", failure_reasons.DUPLICATE
        node.error = f"rejected before evaluation: {reason}"
        return node
    if earlier is not None:  # a resumed run: the study already holds the defaults' evaluation
        return settle_from_study(node, earlier, ctx.task.search_level)
    request = request_for(node, ctx, node.params)
    release = None
    if request.speculation is not None and ctx.release is not None:
        hand_over = ctx.release

        def release(partial: float, prefix: dict[str, float]) -> None:
            hand_over(item, node.copy(status=SPECULATIVE, score_partial=partial,
                                      case_scores=prefix, speculative_at=time.time()))

    report = await ctx.evaluations.run(request, release)
    settled = settle_node(node, report, ctx.task.search_level)
    if space and settled.status == EVALUATED:
        EngineerData.of(settled).score_default = settled.score(ctx.task.search_level)
    return settled


async def earlier_defaults(node: Node, ctx: RunView) -> TrialOutcome | None:
    """The defaults' evaluation an earlier session of the run stored as its study's trial 0."""
    if ctx.optuna_url is None or not ctx.config.param_search.enabled:
        return None
    earlier = await asyncio.to_thread(stored_default, ctx.optuna_url, study_name_of(node.id))  # off the loop
    return earlier if earlier is not None and earlier.value is not None else None


def settle_from_study(node: Node, earlier: TrialOutcome, level: str) -> Node:
    """The node evaluated with its defaults by an earlier session (not evaluated again)."""
    setattr(node, f"score_{level}", earlier.value)
    EngineerData.of(node).score_default = earlier.value
    node.status, node.evaluated_at = EVALUATED, time.time()
    node.eval_s += earlier.seconds
    node.eval_cpu_s += earlier.cpu_s or 0.0
    node.artifacts["defaults"] = "evaluated by an earlier session of the run (its study's trial 0)"
    return node


def owned_knobs(item: Item) -> set[str]:
    """The knob names the parent declared: values a child must not hard-code."""
    try:
        return set(parse_space(item.parent.code).names)
    except SpaceError:
        return set()


def settle_node(node: Node, report: EvalReport, level: str = "full") -> Node:
    """Write what an evaluation at `level` found onto the engineer's copy of the node."""
    outcome = report.outcome
    _record(node, outcome)
    node.evaluated_at = time.time()
    if report.worker is not None:
        node.artifacts["evaluated_on"] = report.worker
    if report.quick_test_failed:
        node.status, node.failed_stage, node.reason = FAILED, GUARD, failure_reasons.GUARD
        node.error = f"{QUICK_TEST_PREFIX}{outcome.error}"
        return node
    if report.quick_test is not None:
        node.eval_s += report.quick_test.seconds
        node.eval_cpu_s += report.quick_test.cpu_s or 0.0
        node.artifacts["quick_test"] = f"passed in {report.quick_test.seconds:.3f} s"
    node.score_partial = report.score_partial
    node.speculative_at = report.released_at
    if report.pruned and outcome.error is None:
        node.status = PRUNED
        scored = outcome.score if outcome.score is not None else report.score_partial  # cases done
        node.artifacts["pruned"] = (f"prefix of {node.cases_done} cases scored {scored:.6g}: "
                                    "cannot beat the pool's best")
    elif outcome.ok:
        setattr(node, f"score_{level}", outcome.score)
        node.status = EVALUATED
    else:
        node.status, node.failed_stage, node.error = FAILED, "engineer", outcome.error
        node.reason = failure_reasons.EVALUATION
    return node


def _record(node: Node, outcome: EvalOutcome) -> None:
    """What every evaluation leaves on its node: cost (added to earlier tries'), metrics,
    artifacts, output tails, cases."""
    node.eval_s += outcome.seconds
    node.eval_cpu_s += outcome.cpu_s or 0.0
    node.metrics, node.artifacts = dict(outcome.metrics), dict(outcome.artifacts)
    if outcome.stdout_tail:
        node.artifacts.setdefault("stdout_tail", outcome.stdout_tail[-4000:])
    if outcome.stderr_tail:
        node.artifacts.setdefault("stderr_tail", outcome.stderr_tail[-4000:])
    if isinstance(outcome, CaseOutcome):
        node.case_scores, node.cases_done = dict(outcome.case_scores), outcome.cases_done
