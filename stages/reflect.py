"""Reflect: the LLM sees a stale candidate and what the pool learned since, and keeps, patches
(re-applies the idea to the current best program) or drops it.

The reflect stage plug-in: the engineer's door (the reflective staleness policy) sends items
here; kept and patched ones go back to the engineer, dropped ones to the commit."""

from __future__ import annotations

from evoforge.infra import failure_reasons
from evoforge.infra.config import RunConfig
from evoforge.infra.evolve_block import EditError
from evoforge.infra.llm.scheduler import REFLECT
from evoforge.infra.llm.types import LLMError
from evoforge.infra.nodes import STALE
from evoforge.infra.prompt_format import CURRENT_HEADER, REFLECT_MARKER, parse_decision
from evoforge.stages.pipeline.llm_call import ask_llm
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT, Stage, StageResult
from evoforge.stages.population.history import PoolHistory
from evoforge.stages.population.item import Item, ItemUpdate
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.prompt_fit import INSPIRATION, Part, fit_to
from evoforge.stages.reflect_data import ReflectData, ReflectOutcome
from evoforge.stages.research_prompt import diff_rules

_MAX_UPDATES = 5


def reflection_messages(item: Item, ctx: RunView, history: PoolHistory) -> list[dict[str, str]]:
    """The prompt: the candidate's change, the pool's updates since it was designed, the best,
    fitted to the LLM's context window (the oldest updates' parts go last, see prompt_fit)."""
    return fit_to(ctx.llm, reflection_parts(item, ctx, history), ctx.config.llm.max_tokens,
                  strict=False).messages


def reflection_parts(item: Item, ctx: RunView, history: PoolHistory) -> list[Part]:
    """The named parts of the reflection prompt, in order, each with its drop rank."""
    node, best, artifact = item.node, ctx.pool.best, ctx.task.artifact
    assert node is not None and best is not None
    parts = [
        Part("system", artifact.system_rules(), role="system"),
        Part("task", f"# Reflection on a stale candidate for task {ctx.task.name}\n"
             f"A candidate was designed against pool version {item.v_i}; the pool is now at version "
             f"{ctx.pool.v}. Decide whether its change still adds value on top of what the pool has "
             f"learned since."),
        Part("candidate", f"## The candidate's change (on node {item.parent.id}, score "
             f"{ctx.pool.value(item.parent)})\nMotivation: {node.motivation.strip() or 'n/a'}\n"
             f"```diff\n{node.diff.rstrip()}\n```"),
        Part("updates heading", f"## What changed in the pool since version {item.v_i}",
             requires="update "),
    ]
    if item.tainted_by:
        parts.append(Part("rollback", f"Its parent {item.tainted_by} entered the pool on a partial "
                          f"evaluation and was rolled back: the full evaluation did not confirm it."))
    for update in history.since(item.v_i)[-_MAX_UPDATES:]:
        u = update.node
        score = ctx.pool.value(u) if ctx.pool.value(u) is not None else u.score_partial
        parts.append(Part(f"update v{update.v}",
                          f"### v{update.v}: {update.kind.replace('_', ' ')} node {u.id}, score {score}\n"
                          f"Motivation: {u.motivation.strip()[:400] or 'n/a'}\n"
                          f"```diff\n{u.diff.rstrip()}\n```", INSPIRATION))
    header = f"{CURRENT_HEADER}{artifact.noun}"
    parts.append(Part("best", artifact.show(best.code).replace(header, f"{header} (the pool's best)", 1)))
    parts.append(Part("rules",
        f"{REFLECT_MARKER} answer with one line `Decision: keep` (evaluate the candidate as it "
        f"is), `Decision: drop` (it no longer adds value), or `Decision: patch` followed by the "
        f"candidate's idea applied to the current {artifact.noun} above, in this form:\n\n"
        f"{diff_rules(artifact)}"))
    return parts


class Reflect(Stage):
    """Keeps, patches or drops stale items (only under `staleness.policy: reflective`)."""

    name = "reflect"
    then = "engineer"  # a side stage: reached from the engineer's door, back to the engineer
    task_run_name = "reflect-{label}"
    workers_like = "engineer"

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.staleness.policy == "reflective"


    async def run(self, item: Item, ctx: RunView) -> StageResult:
        return await reflect(item, ctx, ctx.history)


async def reflect(item: Item, ctx: RunView, history: PoolHistory) -> StageResult:
    """Keep, patch or drop `item` by asking the LLM; the decision is recorded on its node."""
    assert item.node is not None and ctx.pool.best is not None
    node, best = item.node.copy(), ctx.pool.best
    back = ItemUpdate(reflected=True)
    messages = reflection_messages(item, ctx, history)
    try:
        completion = await ask_llm(ctx, node, messages, priority=REFLECT)
    except LLMError as exc:
        StalenessData.of(node).add(f"reflection call failed ({exc}): kept")
        ReflectData.of(node).outcome = ReflectOutcome.CALL_FAILED
        return StageResult(node, updates=back)
    decision = parse_decision(completion.text)
    if decision == "drop":
        node.status = STALE
        StalenessData.of(node).add("reflection: dropped")
        ReflectData.of(node).outcome = ReflectOutcome.DROPPED
        node.reason = failure_reasons.STALE
        return StageResult(node, to=COMMIT, updates=back)
    if decision == "patch":
        try:
            code = ctx.task.artifact.apply(best.code, completion.text).code
        except EditError as exc:
            StalenessData.of(node).add(f"reflection: patch unusable ({exc}): kept")
            ReflectData.of(node).outcome = ReflectOutcome.UNUSABLE_PATCH
            return StageResult(node, updates=back)
        reflected = ReflectData.of(node)
        reflected.outcome, reflected.patched_from = ReflectOutcome.PATCHED, item.parent.id
        node.code, node.diff = code, ctx.task.artifact.diff(best.code, code)
        node.parent_id, node.pool_version = best.id, ctx.pool.v
        StalenessData.of(node).add(f"reflection: patched onto {best.id}")
        rebased = ItemUpdate(reflected=True, parent=best, v_i=ctx.pool.v, tainted_by=None)
        return StageResult(node, updates=rebased)
    verdict = "kept" if decision == "keep" else "no decision in the answer: kept"
    StalenessData.of(node).add(f"reflection: {verdict}")
    ReflectData.of(node).outcome = ReflectOutcome.KEPT if decision == "keep" else ReflectOutcome.UNDECIDED
    return StageResult(node, updates=back)
