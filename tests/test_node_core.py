"""The node keeps its core; the built-in stages' data lives in their own data on it, is stored and
shown from there, and the run's reflection counters count the reflect stage's typed outcome."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from evoforge.infra.nodes import EVALUATED, REJECTED, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.judge_data import JudgeData
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.population.staleness_data import StalenessData
from evoforge.stages.population.stats import RunStats
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.reflect_data import ReflectData, ReflectOutcome
from evoforge.stages.research_data import ResearchData
from evoforge.stages.sinks.mlflow_runs import candidate_run
from evoforge.stages.sinks.run_files import write_node_files

MOVED = {"inspiration_ids", "inspirations_used", "prompt_dropped", "ideas_used", "score_default",
         "hardcoded", "promoted_round", "judge_score", "repeat_of", "staleness", "reflection", "analysis",
         "lessons", "branch"}


def _full_node() -> Node:
    node = Node(id="n1", run_id="r", code="x = 1\n", status=EVALUATED, score_full=0.5, evaluated_at=1.0)
    research = ResearchData.of(node)
    research.inspiration_ids, research.inspirations_used = ["a", "b"], ["b"]
    research.ideas_used, research.prompt_dropped = ["k1"], ["inspiration 2"]
    EngineerData.of(node).score_default, EngineerData.of(node).hardcoded = 0.25, ["lr = 0.1"]
    PromotionData.of(node).round = 3
    JudgeData.of(node).score = 0.7
    ReflectData.of(node).outcome = ReflectOutcome.PATCHED
    return node


def test_the_node_has_none_of_the_moved_fields():
    assert not MOVED & {f.name for f in fields(Node)}


def test_each_stages_data_round_trips_through_the_node_database(tmp_path):
    node = _full_node()
    with NodeStore(tmp_path / "n.duckdb") as store:
        store.put(node)
    with NodeStore(tmp_path / "n.duckdb", read_only=True) as store:
        back = store.get("n1")
    assert back == node
    assert ResearchData.peek(back).inspirations_used == ["b"]
    assert EngineerData.peek(back).score_default == 0.25
    assert ReflectData.peek(back).outcome is ReflectOutcome.PATCHED  # typed again, not the text


def test_mlflow_and_the_node_files_show_the_stages_data(tmp_path):
    node = _full_node()
    run = candidate_run(node, "full")
    assert run.metrics["score_full_defaults"] == 0.25
    assert run.params["hardcoded"] == "lr = 0.1" and run.params["prompt_dropped"] == "inspiration 2"
    repeat = Node(id="n2", run_id="r", code="x = 1\n", status=REJECTED)
    RepeatData.of(repeat).repeat_of = "n1"
    assert candidate_run(repeat, "full").tags["repeat_of"] == "n1"
    write_node_files(RunPaths(tmp_path), node)
    shown = json.loads((RunPaths(tmp_path).node_dir("n1") / "result.json").read_text())
    assert shown["hardcoded"] == ["lr = 0.1"] and shown["prompt_dropped"] == ["inspiration 2"]


def test_the_judge_bonus_reads_the_judges_data():
    pool = Pool(maximize=True, level="full", judge_weight=0.5)
    plain = Node(id="p", run_id="r", code="a = 1\n", status=EVALUATED, score_full=1.0)
    judged = plain.copy(id="j", code="a = 2\n")
    JudgeData.of(judged).score = 0.4
    assert pool.score(judged) - pool.score(plain) == pytest.approx(0.5 * 0.4)


def test_reflection_counters_count_the_typed_outcome_not_the_note():
    worded = Node(id="w", run_id="r", code="", status=EVALUATED, evaluated_at=1.0)
    StalenessData.of(worded).add("reflective: staleness 3; reflection: patched onto b")  # no outcome
    patched = Node(id="p", run_id="r", code="", status=EVALUATED, evaluated_at=1.0, llm_s=2.0)
    ReflectData.of(patched).outcome = ReflectOutcome.PATCHED
    failed = Node(id="f", run_id="r", code="", status=EVALUATED, evaluated_at=1.0)
    ReflectData.of(failed).outcome = ReflectOutcome.CALL_FAILED
    dropped = Node(id="d", run_id="r", code="", status=EVALUATED, evaluated_at=1.0)
    ReflectData.of(dropped).outcome = ReflectOutcome.DROPPED
    stats = RunStats.rebuild([worded, patched, failed, dropped])
    assert stats.reflected == 2 and stats.patched == 1 and stats.patched_llm_s == 2.0


def test_promotions_and_repeats_are_counted_from_their_stages_data():
    promoted = Node(id="a", run_id="r", code="", status=EVALUATED, evaluated_at=1.0)
    PromotionData.of(promoted).round = 1
    repeat = Node(id="b", run_id="r", code="", status=REJECTED)
    RepeatData.of(repeat).repeat_of = "a"
    stats = RunStats.rebuild([promoted, repeat])
    assert stats.promotions == 1 and stats.repeats == 1
