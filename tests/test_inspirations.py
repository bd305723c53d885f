"""Inspirations: chosen as best / diverse / recent, labelled in the prompt, and the ones used recorded."""

from __future__ import annotations

import asyncio
import random

from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.infra.config import RunConfig, SearchConfig
from evoforge.infra.llm.types import Completion
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.prompt_format import FORMAT_DIFF
from evoforge.stages.pipeline.draw import draw_item
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.research import research
from evoforge.stages.research_data import ResearchData
from evoforge.stages.research_prompt import inspirations_used, research_messages
from evoforge.stages.sample import make_sampler
from evoforge.stages.sample.inspirations import BEST, DIVERSE, RECENT, Inspiration, pick_inspirations

TASK = load_task("circle_packing")


def evaluated(nid: str, score: float, parent: Node | None = None, island: int = 0) -> Node:
    code = TASK.initial_code.replace("(8, 0.25, 0.0)", f"(8, 0.25, {score:.4f})")
    return Node(id=nid, run_id="t", code=code, parent_id=parent.id if parent else None, island=island,
                score_full=score, status=EVALUATED, motivation=f"motivation of {nid}")


class ScriptedLLM:
    """An LLM backend that answers with a fixed text."""

    name, model = "scripted", "scripted-1"

    def __init__(self, text: str):
        self.text = text

    async def complete(self, messages, *, temperature, max_tokens) -> Completion:
        return Completion(text=self.text, model=self.model, backend=self.name, tokens_in=10,
                          tokens_out=20, seconds=0.01)

    async def close(self) -> None:
        return None


def context(pool: Pool, search: SearchConfig, tmp_path, llm=None) -> RunView:
    cfg = RunConfig(search=search)
    sampler = make_sampler(search)
    for n in pool.nodes:
        sampler.on_node_added(n, pool)
    return RunView(run_id="t", task=TASK, config=cfg, llm=llm or ScriptedLLM(""), pool=pool,
                        sampler=sampler, rng=random.Random(0), limits=SandboxLimits(timeout_s=30),
                        scratch=tmp_path)


def small_pool() -> tuple[Pool, dict[str, Node]]:
    pool = Pool()
    seed = evaluated("seed", 1.0)
    a = evaluated("a", 1.5, seed)
    b = evaluated("b", 1.2, a)  # worse than its parent
    c = evaluated("c", 1.4, a)
    d = evaluated("d", 1.3, seed)  # the latest improvement
    for n in (seed, a, b, c, d):
        pool.add(n)
    return pool, {n.id: n for n in (seed, a, b, c, d)}


def test_inspirations_are_best_then_diverse_then_recent_never_the_parent():
    pool, by_id = small_pool()
    sampler = make_sampler(SearchConfig(sampler="uniform"))
    chosen = pick_inspirations(pool, sampler, by_id["a"], random.Random(0), 3)
    assert [i.label for i in chosen] == [BEST, DIVERSE, RECENT]
    assert chosen[0].node is by_id["c"]  # the best that is not the parent
    assert chosen[2].node is by_id["d"]  # the newest node that beat its own parent
    ids = [i.id for i in chosen]
    assert "a" not in ids and len(set(ids)) == 3
    assert pick_inspirations(pool, sampler, by_id["a"], random.Random(0), 0) == []


def test_diverse_inspirations_come_from_other_islands_under_the_island_policy():
    pool = Pool()
    homes = [evaluated(f"i{k}", 1.0 + k / 10, island=k) for k in range(5)]
    for n in homes:
        pool.add(n)
    sampler = make_sampler(SearchConfig(sampler="islands"))
    for n in homes:
        sampler.on_node_added(n, pool)
    chosen = pick_inspirations(pool, sampler, homes[0], random.Random(0), 4)
    diverse = [i.node for i in chosen if i.label == DIVERSE]
    assert diverse and all(n.island != 0 for n in diverse)


def test_the_prompt_labels_each_inspiration_and_asks_which_were_used():
    pool, by_id = small_pool()
    shown = [Inspiration(by_id["c"], BEST), Inspiration(by_id["b"], DIVERSE), Inspiration(by_id["d"], RECENT)]
    text = research_messages(TASK, by_id["a"], shown, FORMAT_DIFF)[-1]["content"]
    assert "### Inspiration 1: best" in text and "(node c, " in text
    assert "### Inspiration 2: diverse" in text and "### Inspiration 3: recent" in text
    assert "Inspirations used: 1, 3" in text and "Inspirations used: none" in text
    plain = research_messages(TASK, by_id["a"], [], FORMAT_DIFF)[-1]["content"]
    assert "Inspirations used" not in plain


def test_the_inspirations_used_line_is_parsed_into_node_ids():
    shown = [Inspiration(evaluated(x, 1.0), BEST) for x in ("x1", "x2", "x3")]
    assert inspirations_used("Move a circle.\nInspirations used: 2, 3\n", shown) == ["x2", "x3"]
    assert inspirations_used("**Inspirations used:** #1 and #1", shown) == ["x1"]
    assert inspirations_used("Inspirations used: none", shown) == []
    assert inspirations_used("Inspirations used: 7", shown) == []  # no such inspiration
    assert inspirations_used("no line at all", shown) == []


def test_research_records_the_inspirations_used_and_keeps_the_line_out_of_the_motivation(tmp_path):
    pool, by_id = small_pool()
    answer = ("Shift the middle ring slightly outward.\nInspirations used: 2\n\n"
              "<<<<<<< SEARCH\n        (8, 0.25, 1.5000),\n=======\n        (8, 0.26, 1.5000),\n"
              ">>>>>>> REPLACE\n")
    ctx = context(pool, SearchConfig(sampler="uniform"), tmp_path, ScriptedLLM(answer))
    shown = [Inspiration(by_id["c"], BEST), Inspiration(by_id["d"], DIVERSE)]
    item = Item(v_i=pool.v, parent=by_id["a"], inspirations=shown, answer_format=FORMAT_DIFF)
    result = asyncio.run(research(item, ctx))
    item.apply(result.node, result.updates)
    assert result.to is None and item.node.status == "proposed", item.node.error
    assert ResearchData.peek(item.node).inspirations_used == ["d"]
    assert ResearchData.peek(item.node).inspiration_ids == ["c", "d"]
    assert item.node.motivation == "Shift the middle ring slightly outward."


def test_drawn_items_carry_labelled_inspirations_and_island_children_stay_on_the_drawn_island(tmp_path):
    pool = Pool()
    seed = evaluated("seed", 1.0)
    pool.add(seed)
    ctx = context(pool, SearchConfig(sampler="islands", islands=3), tmp_path)
    islands = []
    for _ in range(3):
        item = draw_item(ctx)
        island = item.node.island if item.node is not None else item.parent.island
        islands.append(island)
    assert islands == [0, 1, 2]  # the seed's first children spread over the islands
    child = evaluated("child", 2.0, seed, island=2)
    pool.add(child)
    ctx.sampler.on_node_added(child, pool)
    item = draw_item(ctx)  # island 0 again, served from its own member (the seed)
    assert item.parent is seed and item.node is None
    assert all(isinstance(i, Inspiration) for i in item.inspirations)
