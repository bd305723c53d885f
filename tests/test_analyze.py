"""The Analyzer: a prompt with the evaluator's output and a computed comparison, a tolerant parser
of its structured answer, and a stage that writes the report and lessons onto a copy of the node,
labelled with who wrote it (an LLM, the offline analyzer or the simulator)."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.infra.artifacts.program import Program
from evoforge.infra.config import AnalyzeConfig, RunConfig
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig
from evoforge.infra.nodes import EVALUATED, FAILED, PRUNED, REJECTED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.prompt_format import (
    ANALYSIS_MARKER,
    ANALYSIS_SECTIONS,
    EXTRA_SECTION,
    is_analysis_prompt,
    parse_analysis,
    parse_comparison,
)
from evoforge.stages.algorithms import asi_evolve
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.analysis_prompt import analysis_messages, classify_error
from evoforge.stages.analyze import ANALYSIS_BY, Analyze, analyze
from evoforge.stages.debug import RepairData
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample import make_sampler
from tests.scripted_llm import Scripted as _Scripted


def Scripted(text):  # noqa: N802 - the shared stand-in, with this file's model and cost
    return _Scripted(text, "scripted-model")


TASK = load_task("circle_packing")

WELL_FORMED = """## What changed
The ring radius went from 0.45 to 0.44.

## What happened
The score rose by 0.1 over the parent.

## Why it likely happened
A smaller ring leaves room for the outer circles.

## What to try next
- Shrink it further.

## Lessons
- Tightening the layout's inner ring frees room for the outer circles.
- Numeric edits near the current value move the score only a little.
"""


def _report(node: Node) -> str:
    return AnalysisData.peek(node).report


def _lessons(node: Node) -> list[str]:
    return AnalysisData.peek(node).lessons


def _setup(backend, cfg: RunConfig | None = None, **node_fields) -> tuple[Item, RunView]:
    """A pool of seed (1.0) and best (1.2), and an evaluated candidate on the seed (1.1 unless told)."""
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0,
                metrics={"combined_score": 1.0, "sum_radii": 2.0})
    best = Node(id="best", run_id="r", code=TASK.initial_code.replace("0.45", "0.46", 1),
                status=EVALUATED, score_full=1.2, metrics={"combined_score": 1.2, "sum_radii": 2.4})
    pool = Pool()
    pool.add(seed)
    pool.add(best)
    cfg = cfg or RunConfig()
    ctx = RunView("r", TASK, cfg, backend, pool, make_sampler(cfg.search), random.Random(0),
                       SandboxLimits(), Path("."))
    code = TASK.initial_code.replace("0.45", "0.44", 1)
    attempts = node_fields.pop("attempts", None)
    fields = {"status": EVALUATED, "score_full": 1.1, "evaluated_at": time.time(),
              "metrics": {"combined_score": 1.1, "sum_radii": 2.05}, **node_fields}
    if attempts:
        fields["owned"] = {"debug": RepairData(attempts=attempts)}
    item = Item(v_i=1, parent=seed)
    item.node = Node(id="cand", run_id="r", code=code, parent_id="seed", motivation="smaller ring",
                     diff=Program().diff(TASK.initial_code, code), tokens_in=10, llm_s=1.0, **fields)
    return item, ctx


def _prompt(item: Item, ctx: RunView) -> str:
    return analysis_messages(item, ctx)[-1]["content"]


def test_the_prompt_carries_the_metrics_the_cut_output_and_the_computed_deltas():
    cfg = RunConfig(analyze=AnalyzeConfig(max_output_chars=200))
    output = "HEAD-OF-OUTPUT " + "x" * 5000 + " END-OF-OUTPUT"
    item, ctx = _setup(Scripted(""), cfg, artifacts={"stdout_tail": output, "note": "kept"})
    prompt = _prompt(item, ctx)
    assert is_analysis_prompt(prompt) and ANALYSIS_MARKER in prompt
    assert "smaller ring" in prompt and "0.44" in prompt and "circle_packing" in prompt
    assert "sum_radii=2.05" in prompt and "combined_score=1.1" in prompt
    assert "END-OF-OUTPUT" in prompt and "HEAD-OF-OUTPUT" not in prompt and "characters cut" in prompt
    assert "note: kept" in prompt
    facts = parse_comparison(prompt)
    assert facts["status"] == "evaluated" and facts["error class"] == "none"
    assert facts["delta vs parent"] == "+0.1 (+10.0%)" and facts["verdict vs parent"] == "better"
    assert facts["delta vs pool best"] == "-0.1 (-8.3%)" and facts["verdict vs pool best"] == "worse"
    assert facts["metric deltas vs parent"] == "combined_score +0.1, sum_radii +0.05"
    assert facts["diff size"] == "+1 / -1 lines"
    for name in ANALYSIS_SECTIONS:
        assert f"## {name}" in prompt


def test_the_prompt_names_the_error_class_and_cuts_the_error():
    cfg = RunConfig(analyze=AnalyzeConfig(max_output_chars=200))
    error = "evaluator raised ValueError: " + "bad " * 200
    item, ctx = _setup(Scripted(""), cfg, status=FAILED, score_full=None, error=error,
                       failed_stage="engineer", artifacts={"traceback": "Traceback...\nValueError: bad"})
    prompt = _prompt(item, ctx)
    facts = parse_comparison(prompt)
    assert facts["error class"] == "exception ValueError" and facts["verdict vs parent"].startswith("n/a")
    assert "ValueError: bad" in prompt and "characters cut" in prompt and "(in the engineer stage)" in prompt


def test_the_prompt_tells_of_earlier_tries_that_crashed_and_were_repaired():
    item, ctx = _setup(Scripted(""), attempts=[{"error": "evaluator raised IndexError: list index"}])
    assert "Earlier try 1 crashed (exception IndexError) and was repaired" in _prompt(item, ctx)


def test_error_classes_of_common_failures():
    assert classify_error("timed out after 10.0 s; last stderr line: ...") == "timeout"
    assert classify_error("killed by SIGKILL (killed from outside, e.g. by the OOM killer)") == \
        "killed by signal SIGKILL"
    assert classify_error("ran out of memory (MemoryError) during evaluate()") == "out of memory"
    assert classify_error("metric 'combined_score' missing from evaluator result; numeric metrics "
                          "present: none") == "invalid result"
    assert classify_error("metric 'combined_score' is not finite (nan)") == "invalid result"
    assert classify_error("exited with code 3 without writing a result") == "crashed (exit code 3)"
    assert classify_error("case 7 failed: evaluator raised KeyError: 'x' (in evaluate_case())") == \
        "exception KeyError"
    assert classify_error("something else entirely") == "failure"


def test_a_pruned_candidate_is_classed_pruned_with_its_partial_score():
    item, ctx = _setup(Scripted(""), status=PRUNED, score_full=None, score_partial=0.5, cases_done=3)
    facts = parse_comparison(_prompt(item, ctx))
    assert facts["error class"] == "pruned" and "partial, on its first 3" in facts["score"]
    assert facts["verdict vs pool best"] == "worse"


def test_parse_analysis_reads_a_well_formed_answer():
    sections, lessons = parse_analysis(WELL_FORMED)
    assert sections["What changed"] == "The ring radius went from 0.45 to 0.44."
    assert sections["What to try next"] == "- Shrink it further."
    assert sections[EXTRA_SECTION] == ""
    assert lessons == ["Tightening the layout's inner ring frees room for the outer circles.",
                       "Numeric edits near the current value move the score only a little."]


def test_parse_analysis_tolerates_a_sloppy_answer():
    sloppy = ("Sure! Here is my analysis.\n\n**What happened:** the score fell.\n\n"
              "### 3. Why it happened\nProbably the ring.\n\n"
              "What happened was that it slowed down, too.\n\n"  # a sentence, not a heading
              "LESSONS:\n* one\n  that wraps\n2) two\n- three\n- four\n\n## Risks\n- not a lesson\n")
    sections, lessons = parse_analysis(sloppy)
    assert sections["What changed"] == "" and sections["What to try next"] == ""
    assert sections["What happened"] == "the score fell."
    assert sections["Why it likely happened"].startswith("Probably the ring.")
    assert "slowed down" in sections["Why it likely happened"]
    assert lessons == ["one that wraps", "two", "three"]
    assert "Sure! Here is my analysis." in sections[EXTRA_SECTION]
    assert "## Risks" in sections[EXTRA_SECTION] and "not a lesson" in sections[EXTRA_SECTION]


def test_parse_analysis_ignores_headings_inside_code_and_bold_words_in_sentences():
    answer = ("## What to try next\n```python\n# Why: clamp the radius\nr = min(r, 0.5)\n```\n"
              "**Why** it helps is unclear.\n## Lessons\n- Clamp radii.\n")
    sections, lessons = parse_analysis(answer)
    assert sections["Why it likely happened"] == ""
    assert "# Why: clamp the radius" in sections["What to try next"]
    assert "**Why** it helps is unclear." in sections["What to try next"]
    assert lessons == ["Clamp radii."]


def test_parse_analysis_none_and_no_sections():
    assert parse_analysis("## Lessons\nnone")[1] == []
    assert parse_analysis("## Lessons\n- None.\n")[1] == []
    assert parse_analysis("Lessons: none of the tweaks helped\n")[1] == ["none of the tweaks helped"]
    sections, lessons = parse_analysis("I could not follow the format.")
    assert lessons == [] and sections[EXTRA_SECTION] == "I could not follow the format."
    assert all(sections[name] == "" for name in ANALYSIS_SECTIONS)


def test_analyze_writes_the_report_and_lessons_on_a_copy_of_the_node():
    backend = Scripted("Here you go.\n" + WELL_FORMED)
    item, ctx = _setup(backend)
    before = item.node
    result = asyncio.run(analyze(item, ctx))
    node = result.node
    assert node is not before and _report(before) == "" and _lessons(before) == [] and before.tokens_in == 10
    assert result.to is None
    assert _report(node).startswith("# LLM analysis of node cand\n_Written by an LLM (openai backend, "
                                    "model scripted-model)._")
    for name in ANALYSIS_SECTIONS:
        assert f"## {name}" in _report(node)
    assert "A smaller ring leaves room" in _report(node) and "Here you go." in _report(node)
    assert _lessons(node) == ["Tightening the layout's inner ring frees room for the outer circles.",
                            "Numeric edits near the current value move the score only a little."]
    assert node.tokens_in == 110 and node.tokens_out == 20 and node.llm_s == 1.5
    assert node.artifacts[ANALYSIS_BY].startswith("an LLM")
    assert node.status == EVALUATED and node.score_full == 1.1


def test_without_write_back_the_lessons_stay_in_the_report_only():
    item, ctx = _setup(Scripted(WELL_FORMED), RunConfig(analyze=AnalyzeConfig(write_back=False)))
    node = asyncio.run(analyze(item, ctx)).node
    assert _lessons(node) == [] and "- Tightening the layout's inner ring" in _report(node)


def test_a_candidate_never_evaluated_is_passed_over_without_a_call():
    backend = Scripted(WELL_FORMED)
    item, ctx = _setup(backend, status=REJECTED, score_full=None, evaluated_at=None,
                       error="rejected before evaluation: duplicate")
    result = asyncio.run(analyze(item, ctx))
    assert result.node is item.node and _report(result.node) == "" and backend.prompts == []


def test_a_failed_call_leaves_an_analysis_saying_so_and_keeps_the_candidate():
    item, ctx = _setup(Scripted(None))
    node = asyncio.run(analyze(item, ctx)).node
    assert _report(node).startswith("# No analysis of node cand\n")
    assert "analysis call to the scripted backend (model scripted-model) failed" in _report(node)
    assert "HTTP 500 after 3 attempts" in _report(node)
    assert node.status == EVALUATED and node.score_full == 1.1 and _lessons(node) == []
    assert node.llm_s >= 1.0


def test_the_offline_analyzer_is_labelled_and_computed_from_the_comparison():
    item, ctx = _setup(OfflineBackend())
    node = asyncio.run(analyze(item, ctx)).node
    assert _report(node).startswith("# Offline analysis of node cand\n")
    assert "_Written by the offline analyzer (no LLM" in _report(node) and "an LLM (" not in _report(node)
    assert "Offline analyzer (no LLM): a mechanical report" in _report(node)
    assert "better than its parent (seed, score 1; delta +0.1 (+10.0%))" in _report(node)
    assert "worse than the pool's best" in _report(node) and "smaller ring" in _report(node)
    assert _lessons(node) == []  # nothing mechanical generalises from a plain improvement


def test_the_offline_analyzer_draws_a_lesson_from_a_clear_error_class():
    item, ctx = _setup(OfflineBackend(), status=FAILED, score_full=None, failed_stage="engineer",
                       error="timed out after 10.0 s")
    node = asyncio.run(analyze(item, ctx)).node
    assert "It failed (timeout): timed out after 10.0 s" in _report(node)
    assert len(_lessons(node)) == 1 and "time limit" in _lessons(node)[0]


def test_over_the_simulator_an_analysis_prompt_gets_a_structured_simulated_answer():
    async def run(sim: SimulatorProcess) -> Node:
        backend = OpenAIBackend(sim.base_url, sim.config.model, max_retries=0, timeout_s=20)
        try:
            item, ctx = _setup(backend)
            return (await analyze(item, ctx)).node
        finally:
            await backend.close()

    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.0, slots=2, seed=5)) as sim:
        node = asyncio.run(run(sim))
    assert _report(node).startswith("# Simulated analysis of node cand\n")
    assert "_Written by the LLM simulator (evoforge llm-sim, model evoforge-sim): simulated" in _report(node)
    assert "an LLM (" not in _report(node)
    assert "Simulated answer (evoforge llm-sim, no real LLM): a seeded analysis" in _report(node)
    assert "_(not in the answer)_" not in _report(node)
    assert 1 <= len(_lessons(node)) <= 3 and node.tokens_in > 0 and node.tokens_out > 0


def test_the_stage_declares_its_place_and_switch():
    stage = Analyze()
    assert stage.name == "analyze" and stage.task_run_name == "analyze-{label}"
    line = [s.name for s in asi_evolve.pipeline().line]
    assert line[-2:] == ["analyze", "verify"]  # last before the head, but for the test of its claims
    assert stage.enabled(RunConfig()) and not stage.enabled(RunConfig(analyze=AnalyzeConfig(enabled=False)))
    assert stage.workers(RunConfig()).initial == RunConfig().engine.workers["research"]  # an LLM stage
