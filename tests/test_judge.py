"""The LLM judge: a `Score: N/10` line parsed to [0, 1] (garbled: none, with a note), no score
offline, a seeded one over the simulator, and a fitness bonus that ranks a judged node above an
equal-score unjudged one without touching its task score."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.infra.config import AnalyzeConfig, JudgeConfig, RunConfig
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.prompt_format import JUDGE_MARKER, is_judge_prompt, parse_judge_score
from evoforge.stages.algorithms import asi_evolve
from evoforge.stages.analyze import Analyze
from evoforge.stages.engineer import Engineer
from evoforge.stages.judge import JUDGE_NOTE, Judge, judge, judge_messages
from evoforge.stages.judge_data import JudgeData
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import COMMIT
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.research import Research
from evoforge.stages.sample import make_sampler
from tests.scripted_llm import Scripted as _Scripted


def Scripted(text):  # noqa: N802 - the shared stand-in, with this file's model and cost
    return _Scripted(text, "scripted-model", (50, 5), 0.25)


TASK = load_task("circle_packing")


def _setup(backend, **node_fields) -> tuple[Item, RunView]:
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0)
    pool = Pool()
    pool.add(seed)
    cfg = RunConfig(judge=JudgeConfig(weight=0.1))
    ctx = RunView("r", TASK, cfg, backend, pool, make_sampler(cfg.search), random.Random(0),
                       SandboxLimits(), Path("."))
    fields = {"status": EVALUATED, "score_full": 1.1, "evaluated_at": time.time(),
              "metrics": {"combined_score": 1.1}, **node_fields}
    item = Item(v_i=0, parent=seed)
    item.node = Node(id="cand", run_id="r", code=TASK.initial_code.replace("0.45", "0.44", 1),
                     parent_id="seed", **fields)
    return item, ctx


@pytest.mark.parametrize(("answer", "score"), [
    ("Clean and promising.\nScore: 7/10", 0.7),
    ("**Score:** 8 / 10", 0.8),
    ("score = 6", 0.6),
    ("Score: 4/5", 0.8),
    ("Score: 2/10 at first glance, but on reflection\nScore: 9/10", 0.9),
    ("Score: 12/10", None),
    ("I would rate it highly.", None),
    ("", None),
])
def test_the_score_line_is_parsed_to_the_unit_interval(answer, score):
    assert parse_judge_score(answer) == score


def test_the_prompt_shows_the_evolve_block_and_the_metrics():
    item, ctx = _setup(Scripted("Score: 5/10"))
    prompt = judge_messages(item.node, TASK)[-1]["content"]
    assert is_judge_prompt(prompt) and JUDGE_MARKER in prompt and "Score: N/10" in prompt
    assert "combined_score=1.1" in prompt and "0.44" in prompt
    assert "EVOLVE-BLOCK-START" not in prompt  # the block's contents, not the frozen frame


def test_a_judged_node_gets_its_score_and_cost_on_a_copy():
    item, ctx = _setup(Scripted("Readable, with room to grow.\nScore: 8/10"))
    result = asyncio.run(judge(item, ctx))
    node = result.node
    assert node is not item.node and JudgeData.peek(item.node).score is None
    assert JUDGE_NOTE not in item.node.artifacts
    assert result.to is None and JudgeData.peek(node).score == 0.8 and node.score_full == 1.1
    assert node.artifacts[JUDGE_NOTE].startswith("8/10 by an LLM (openai backend")
    assert node.tokens_in == 50 and node.tokens_out == 5 and node.llm_s == 0.25


def test_a_garbled_answer_or_a_failed_call_leaves_no_score_with_a_note():
    for backend, words in ((Scripted("It is fine, I suppose."), "no usable `Score: N/10` line"),
                           (Scripted(None), "judge call failed (HTTP 500 after 3 attempts)")):
        item, ctx = _setup(backend)
        node = asyncio.run(judge(item, ctx)).node
        assert JudgeData.peek(node).score is None and words in node.artifacts[JUDGE_NOTE]
        assert node.status == EVALUATED


def test_offline_there_is_no_judgement_and_no_score():
    item, ctx = _setup(OfflineBackend())
    node = asyncio.run(judge(item, ctx)).node
    assert JudgeData.peek(node).score is None
    assert node.artifacts[JUDGE_NOTE] == "no score: the offline backend has no judgement of code quality"


def test_only_fully_evaluated_candidates_are_judged():
    backend = Scripted("Score: 9/10")
    item, ctx = _setup(backend, status=FAILED, score_full=None, error="timed out after 1.0 s")
    result = asyncio.run(judge(item, ctx))
    assert result.node is item.node and JudgeData.peek(result.node).score is None and backend.prompts == []


def test_over_the_simulator_the_judge_gets_a_seeded_score():
    async def run(sim: SimulatorProcess) -> Node:
        backend = OpenAIBackend(sim.base_url, sim.config.model, max_retries=0, timeout_s=20)
        try:
            item, ctx = _setup(backend)
            return (await judge(item, ctx)).node
        finally:
            await backend.close()

    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.0, slots=2, seed=2)) as sim:
        node = asyncio.run(run(sim))
    judged = JudgeData.peek(node).score
    assert judged is not None and 0.0 <= judged <= 1.0
    assert "by the LLM simulator (evoforge llm-sim" in node.artifacts[JUDGE_NOTE]


def _equal_pair() -> tuple[Node, Node]:
    plain = Node(id="plain", run_id="r", code="a = 1\n", status=EVALUATED, score_full=1.0)
    judged = Node(id="judged", run_id="r", code="a = 2\n", status=EVALUATED, score_full=1.0,
                  owned={JudgeData.owner: JudgeData(score=0.5)})
    return plain, judged


@pytest.mark.parametrize("maximize", [True, False])
def test_the_judge_bonus_ranks_a_judged_node_above_an_equal_unjudged_one(maximize):
    plain, judged = _equal_pair()
    pool = Pool(maximize=maximize, judge_weight=0.1, judge_scale=2.0)
    pool.add(plain)
    pool.add(judged)
    assert pool.best is judged and pool.ranked() == [judged, plain]
    assert pool.score(judged) == pytest.approx(pool.score(plain) + 0.1 * 0.5 * 2.0)
    assert judged.score_full == 1.0 and plain.score_full == 1.0


def test_without_a_judge_weight_equal_scores_keep_their_order():
    plain, judged = _equal_pair()
    pool = Pool()
    pool.add(plain)
    pool.add(judged)
    assert pool.best is plain and pool.score(judged) == pool.score(plain) == 1.0


def test_a_rebuilt_pool_keeps_the_judge_blend_only_when_asked():
    plain, judged = _equal_pair()
    assert Pool.rebuild([plain, judged], maximize=True, v=0).best is plain
    rebuilt = Pool.rebuild([plain, judged], maximize=True, v=0, judge_weight=0.1, judge_scale=1.0)
    assert rebuilt.best is judged and rebuilt.ranked() == [judged, plain]


def test_the_stage_is_on_with_a_weight_and_fits_with_or_without_the_analyzer():
    stage = Judge()
    assert stage.name == "judge" and stage.task_run_name == "judge-{label}"
    assert not stage.enabled(RunConfig()) and stage.enabled(RunConfig(judge=JudgeConfig(weight=0.2)))
    stages = [Research(), Engineer(), Analyze(), Judge()]
    pipeline = asi_evolve.pipeline()
    cfg = RunConfig(judge=JudgeConfig(weight=0.2))
    routes = pipeline.routes({s.name for s in stages if s.enabled(cfg)})
    assert routes["engineer"] == "judge" and routes["judge"] == "analyze" and routes["analyze"] == COMMIT
    cfg = RunConfig(judge=JudgeConfig(weight=0.2), analyze=AnalyzeConfig(enabled=False))
    routes = pipeline.routes({s.name for s in stages if s.enabled(cfg)})
    assert routes["engineer"] == "judge" and routes["judge"] == COMMIT
