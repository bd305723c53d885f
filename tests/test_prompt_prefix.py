"""The research prompt starts with a stable part, byte-identical across the calls of a run, so that
vLLM's automatic prefix caching reuses it; what varies comes after it, and the non-LLM answerers
still find the program and the answer format."""

from __future__ import annotations

import asyncio
import os
import random

from evoforge.cognition.knowledge import Knowledge
from evoforge.evaluators.task import load_task
from evoforge.infra.llm_sim.answers import build_answer
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.prompt_format import FORMAT_DIFF, FORMAT_REWRITE, extract_program, requested_format
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.mutation_contract import CONTRACT
from evoforge.stages.research_prompt import SYSTEM, research_messages, stable_prefix
from evoforge.stages.sample.inspirations import BEST, Inspiration

TASK = load_task("circle_packing")


def _node(node_id: str, score: float, nudge: str, **kw) -> Node:
    return Node(id=node_id, run_id="r", code=TASK.initial_code.replace("0.1", nudge, 1), status=EVALUATED,
                score_full=score, motivation=f"design of {node_id}", **kw)


def _shared(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def _two_prompts(knobs: bool = False) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    first = research_messages(TASK, _node("p1", 1.2, "0.11"), [], FORMAT_DIFF, knobs=knobs)
    knowledge = [Knowledge(id="k1", title="Hexagonal start", text="Start from a hex lattice.",
                           provenance="human seed", score=0.5)]
    helped = {"analyze": AnalysisData(report="It helped.")}
    second = research_messages(TASK, _node("p2", 1.5, "0.12", owned=helped),
                               [Inspiration(_node("i1", 1.6, "0.13"), BEST)], FORMAT_REWRITE,
                               knowledge, knobs=knobs)
    return first, second


def test_two_prompts_of_a_run_share_the_system_message_and_the_whole_stable_part():
    first, second = _two_prompts()
    assert first[0] == second[0] == {"role": "system", "content": SYSTEM}
    stable = stable_prefix(TASK)
    assert TASK.description.strip() in stable and "SEARCH/REPLACE" in stable and "rewrite:" in stable
    shared = _shared(first[1]["content"], second[1]["content"])
    assert shared >= len(stable)  # measured: the shared prefix reaches the end of the stable part
    assert first[1]["content"].startswith(stable) and second[1]["content"].startswith(stable)
    assert shared < len(stable) + 40  # and what follows is the varying part (the parent)
    assert first[1]["content"][len(stable):].startswith("\n## Parent (node p1")


def test_the_knob_contract_extends_the_shared_prefix_when_every_parent_declares_knobs():
    first, second = _two_prompts(knobs=True)
    shared = _shared(first[1]["content"], second[1]["content"])
    assert shared >= len(stable_prefix(TASK)) + len(CONTRACT)


def test_the_answer_format_is_named_last_and_read_back_by_the_offline_proposer_and_the_simulator():
    first, second = _two_prompts()
    diff_prompt, rewrite_prompt = first[1]["content"], second[1]["content"]
    assert diff_prompt.rstrip().splitlines()[-1].startswith("Answer format: diff")
    assert requested_format(diff_prompt) == FORMAT_DIFF and requested_format(rewrite_prompt) == FORMAT_REWRITE
    assert "Answer format:" not in stable_prefix(TASK)  # the stable part names no form of its own
    assert extract_program(rewrite_prompt) == _node("p2", 1.5, "0.12").code
    offline = asyncio.run(OfflineBackend(seed=3).complete(second, temperature=0.8, max_tokens=4096))
    assert "```python" in offline.text and "<<<<<<< SEARCH" not in offline.text  # a rewrite, as asked
    simulated = build_answer(diff_prompt, random.Random(1))
    assert "<<<<<<< SEARCH" in simulated
