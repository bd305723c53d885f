"""The reflect stage: keep, patch (onto the current best) or drop a stale candidate, each
decision recorded on the node; a failed or garbled reflection keeps the candidate."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.infra.artifacts.program import Program
from evoforge.infra.config import RunConfig
from evoforge.infra.edits import SearchReplace, render_diff
from evoforge.infra.nodes import EVALUATED, STALE, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT
from evoforge.stages.population.history import NEW_BEST, PoolHistory
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.reflect import reflect
from evoforge.stages.sample import make_sampler
from tests.scripted_llm import Scripted

TASK = load_task("circle_packing")


def _setup(backend) -> tuple[Item, RunView, Node]:
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0)
    best_code = TASK.initial_code.replace("0.45", "0.46", 1)
    best = Node(id="best", run_id="r", code=best_code, status=EVALUATED, score_full=1.2,
                parent_id="seed", diff=Program().diff(TASK.initial_code, best_code), motivation="bigger ring")
    pool = Pool()
    pool.add(seed)
    pool.add(best)
    history = PoolHistory()
    history.record(pool.v, NEW_BEST, best)
    cfg = RunConfig()
    ctx = RunView("r", TASK, cfg, backend, pool, make_sampler(cfg.search), random.Random(0),
                       SandboxLimits(), Path("."), history=history)
    cand_code = TASK.initial_code.replace("0.45", "0.44", 1)
    item = Item(v_i=1, parent=seed)
    item.node = Node(id="cand", run_id="r", code=cand_code, parent_id="seed",
                     diff=Program().diff(TASK.initial_code, cand_code), motivation="smaller ring",
                     tokens_in=10, llm_s=1.0,
                     owned={"staleness": StalenessData(1, "reflective: staleness 1, similarity 1.00")})
    return item, ctx, best


def _reflected(item, ctx):
    """Run the reflect stage and apply its result to the item, as the engine does."""
    result = asyncio.run(reflect(item, ctx, ctx.history))
    assert result.node is not item.node  # the stage worked on its own copy
    item.apply(result.node, result.updates)
    return item, result


def test_the_prompt_shows_the_change_the_pool_updates_and_the_current_best():
    backend = Scripted("Decision: keep")
    item, ctx, best = _setup(backend)
    asyncio.run(reflect(item, ctx, ctx.history))
    prompt = backend.prompts[0]
    assert "smaller ring" in prompt and "bigger ring" in prompt and "Reflection decision:" in prompt
    assert best.code.strip() in prompt and "0.46" in prompt


def test_keep_leaves_the_candidate_and_records_the_decision_and_its_cost():
    item, ctx, _ = _setup(Scripted("Decision: keep\nIndependent of the pool's change."))
    code = item.node.code
    item, result = _reflected(item, ctx)
    assert result.to is None and item.node.code == code and item.reflected
    assert StalenessData.peek(item.node).note.endswith("reflection: kept")
    assert item.node.tokens_in == 110 and item.node.llm_s == 1.5


def test_drop_marks_the_node_stale():
    item, ctx, _ = _setup(Scripted("Decision: drop\nThe pool already has this."))
    item, result = _reflected(item, ctx)
    assert result.to == COMMIT and item.node.status == STALE
    assert "reflection: dropped" in StalenessData.peek(item.node).note


def test_patch_reapplies_the_idea_onto_the_current_best():
    line = next(ln for ln in TASK.initial_code.splitlines() if "0.45" in ln)
    patched_line = line.replace("0.45", "0.455")
    answer = "Decision: patch\nRe-apply onto the best.\n\n" + render_diff(
        [SearchReplace(line.replace("0.45", "0.46") + "\n", patched_line.replace("0.455", "0.47") + "\n")])
    item, ctx, best = _setup(Scripted(answer))
    item, result = _reflected(item, ctx)
    assert result.to is None and item.parent is best and item.v_i == ctx.pool.v
    assert item.node.parent_id == "best" and "0.47" in item.node.code
    assert "patched onto best" in StalenessData.peek(item.node).note


def test_an_unusable_patch_or_a_failed_call_keeps_the_candidate_with_the_reason():
    for backend, words in ((Scripted("Decision: patch\nno blocks here"), "patch unusable"),
                           (Scripted(None), "reflection call failed"),
                           (Scripted("I am not sure."), "no decision")):
        item, ctx, _ = _setup(backend)
        code = item.node.code
        item, result = _reflected(item, ctx)
        assert result.to is None and item.node.code == code and words in StalenessData.peek(item.node).note


def test_the_offline_proposer_answers_reflections_with_a_labelled_patch():
    item, ctx, best = _setup(OfflineBackend(seed=3))
    item, _ = _reflected(item, ctx)
    assert item.node.parent_id == "best" and "patched onto best" in StalenessData.peek(item.node).note
    assert item.node.code != best.code
