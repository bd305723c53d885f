"""Prompts fit the model's context window: parts leave in the documented order (inspirations last
first, then cognition items, feedback, the parent's analysis, metrics), the task, the rules and
the parent never; the node records what was left out; an unknown window drops nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from pathlib import Path

import pytest

from evoforge.cognition.knowledge import Knowledge
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.infra.config import RunConfig
from evoforge.infra.failure_reasons import PROMPT_TOO_LONG
from evoforge.infra.llm.spending import prompt_tokens
from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.analysis_prompt import analysis_messages, analysis_parts
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.prompt_fit import (
    ANALYSIS,
    INSPIRATION,
    KEEP,
    MARGIN,
    Part,
    PromptTooLarge,
    fit,
    messages_of,
)
from evoforge.stages.research import research
from evoforge.stages.research_data import ResearchData
from evoforge.stages.research_prompt import research_parts
from evoforge.stages.sample import make_sampler
from evoforge.stages.sample.inspirations import BEST, DIVERSE, Inspiration
from evoforge.stages.sinks.run_files import write_node_files
from tests.scripted_llm import Scripted

TASK = load_task("circle_packing")
MAX_TOKENS = 512
ANSWER = ("Nudge the ring.\nInspirations used: 1\nIdeas used: K1\n<<<<<<< SEARCH\n"
          "        (8, 0.25, 0.0),\n=======\n        (8, 0.26, 0.0),\n>>>>>>> REPLACE\n")


class Windowed(Scripted):
    """A scripted endpoint that knows its context window (as OpenAIBackend reports it)."""

    def __init__(self, window: int | None) -> None:
        super().__init__(ANSWER)
        self.context_window = window


def _node(node_id: str, nudge: str, status=EVALUATED, **kw) -> Node:
    return Node(id=node_id, run_id="r", code=TASK.initial_code.replace("0.1", nudge, 1), status=status,
                score_full=1.5, motivation=f"design of {node_id} " + "because " * 40,
                metrics={"combined_score": 1.5, "validity": 1.0}, **kw)


def _item() -> Item:
    report = "It helped: " + "the ring is tighter. " * 20
    parent = _node("parent", "0.11", owned={"analyze": AnalysisData(report=report)})
    knowledge = [Knowledge(id=f"k{i}", title=f"Idea {i}", text="Try a hex lattice. " * 30,
                           provenance="human seed", score=0.5) for i in (1, 2)]
    return Item(v_i=0, parent=parent, inspirations=[Inspiration(_node("i1", "0.12"), BEST),
                                                    Inspiration(_node("i2", "0.13"), DIVERSE)],
                knowledge=knowledge, feedback="[case-1] The ring overlaps.\n[case-2] Too small.")


def _ctx(llm) -> RunView:
    cfg = RunConfig()
    cfg.llm.max_tokens = MAX_TOKENS
    return RunView("r", TASK, cfg, llm, Pool(), make_sampler(cfg.search), random.Random(0),
                        SandboxLimits(), Path("."))


def _window_without(item: Item, left_out: tuple[str, ...]) -> int:
    """A window just large enough for the research prompt without the parts named `left_out...`."""
    parts = research_parts(TASK, item.parent, item.inspirations, "diff", item.knowledge,
                           feedback=item.feedback)
    kept = [p for p in parts if not p.name.startswith(left_out)]
    return prompt_tokens(messages_of(kept)) + MAX_TOKENS + MARGIN + 5


def test_a_small_window_drops_inspirations_then_cognition_and_the_node_records_it(tmp_path):
    item = _item()
    window = _window_without(item, ("inspiration", "knowledge"))
    llm = Windowed(window)
    result = asyncio.run(research(item, _ctx(llm)))
    node = result.node
    assert node.status == PROPOSED, node.error
    research_data = ResearchData.peek(node)
    assert research_data.prompt_dropped == ["inspiration 2", "inspiration 1", "knowledge K2", "knowledge K1"]
    sent = result.updates.prompt
    assert prompt_tokens(sent) <= window - MAX_TOKENS  # what was sent fits, with room for the answer
    text = sent[-1]["content"]
    assert "## Inspirations" not in text and "Inspirations used:" not in text
    assert "Prior knowledge" not in text and "Ideas used:" not in text
    assert "## Feedback on the parent's cases" in text and "What the Analyzer found" in text  # kept
    assert text.startswith("# Task: circle_packing") and "## Current program" in text
    assert research_data.inspirations_used == [] and research_data.ideas_used == []  # not shown: ignored
    store = NodeStore(tmp_path / "nodes.duckdb")  # stored like the other list fields, and shown
    store.put(node)
    assert ResearchData.peek(store.get(node.id)).prompt_dropped == research_data.prompt_dropped
    store.close()
    write_node_files(RunPaths(tmp_path), node)
    shown = json.loads((RunPaths(tmp_path).node_dir(node.id) / "result.json").read_text())
    assert shown["prompt_dropped"] == research_data.prompt_dropped


def test_an_unknown_window_drops_nothing():
    item = _item()
    result = asyncio.run(research(item, _ctx(Windowed(None))))
    research_data = ResearchData.peek(result.node)
    assert research_data.prompt_dropped == [] and research_data.inspirations_used == ["i1"]
    text = result.updates.prompt[-1]["content"]
    assert "### Inspiration 2" in text and "### K2" in text


def test_a_bit_more_room_keeps_the_first_inspiration_and_every_knowledge_item():
    item = _item()
    window = _window_without(item, ("inspiration 2",))
    result = asyncio.run(research(item, _ctx(Windowed(window))))
    research_data = ResearchData.peek(result.node)
    assert research_data.prompt_dropped == ["inspiration 2"] and research_data.inspirations_used == ["i1"]
    assert prompt_tokens(result.updates.prompt) <= window - MAX_TOKENS


def test_a_parent_that_cannot_fit_fails_the_candidate_with_a_clear_reason_and_no_call():
    item = _item()
    llm = Windowed(MAX_TOKENS + 100)
    result = asyncio.run(research(item, _ctx(llm)))
    assert result.node.status == FAILED and llm.prompts == []
    assert "prompt too large" in result.node.error and "llm.max_tokens (512)" in result.node.error
    assert result.node.reason == PROMPT_TOO_LONG


def test_fit_drops_by_rank_last_first_shortens_before_dropping_and_raises_when_the_fixed_parts_overflow():
    def count(messages):
        return sum(len(m["content"]) for m in messages)

    parts = [Part("task", "t" * 10), Part("analysis", "a" * 50, ANALYSIS, short="a" * 5),
             Part("inspiration 1", "i" * 40, INSPIRATION), Part("inspiration 2", "j" * 40, INSPIRATION),
             Part("rule", "r", requires="inspiration ")]
    fitted = fit(parts, window=200 + 70, max_tokens=200, count=count, margin=0)
    assert fitted.dropped == ["inspiration 2", "inspiration 1"]
    assert fitted.messages[0]["content"] == "t" * 10 + "\n" + "a" * 50  # the rule went with them
    fitted = fit(parts, window=200 + 20, max_tokens=200, count=count, margin=0)
    assert fitted.dropped == ["inspiration 2", "inspiration 1", "analysis (shortened)"]
    assert count(fitted.messages) <= 20
    assert fit(parts, None, 10**9, count).dropped == []
    with pytest.raises(PromptTooLarge, match=r"context window \(205\) minus llm.max_tokens \(200\)"):
        fit(parts, window=205, max_tokens=200, count=count, margin=0)
    assert fit([Part("task", "t" * 10, KEEP)], 205, 200, count, margin=0, strict=False).dropped == []


def test_the_analysis_prompt_fits_by_dropping_the_output_before_the_comparison():
    item = _item()
    crashed = _node("cand", "0.14", parent_id="parent", status=FAILED, error="evaluator raised ValueError",
                    artifacts={"stderr_tail": "warning: overlap\n" * 400}, diff="+x\n" * 50)
    item.node = crashed
    ctx = _ctx(Windowed(None))
    full = analysis_messages(item, ctx)
    parts = analysis_parts(item, ctx)
    fixed = [p for p in parts if p.drop == KEEP]
    ctx = dataclasses.replace(ctx, llm=Windowed(prompt_tokens(messages_of(fixed)) + MAX_TOKENS + MARGIN + 40))
    fitted = analysis_messages(item, ctx)
    assert prompt_tokens(fitted) <= ctx.llm.context_window - MAX_TOKENS < prompt_tokens(full)
    assert "## Computed comparison" in fitted[-1]["content"] and "Analysis request:" in fitted[-1]["content"]
    assert "warning: overlap" not in fitted[-1]["content"]


def test_a_seed_that_cannot_fit_stops_the_run_at_start_with_one_line(tmp_path):
    from evoforge.flows.prepare import Prepared, RunRequest
    from evoforge.infra.config import ConfigError

    cfg = RunConfig()
    cfg.llm.max_tokens = MAX_TOKENS
    small = Prepared(RunRequest(task="circle_packing", run_dir=str(tmp_path), config=cfg), TASK,
                     Windowed(MAX_TOKENS + 200), pipeline=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as raised:
        asyncio.run(small.check_llm())
    line = str(raised.value)
    assert "\n" not in line and line.startswith("the seed (") and "context window (712) of scripted" in line
    assert "minus llm.max_tokens (512)" in line
    roomy = Prepared(RunRequest(task="circle_packing", run_dir=str(tmp_path), config=cfg), TASK,
                     Windowed(32768), pipeline=None)  # type: ignore[arg-type]
    asyncio.run(roomy.check_llm())
    assert roomy.checked
