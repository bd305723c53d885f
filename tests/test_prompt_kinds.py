"""Each artifact kind's prompts speak of that kind: a prompt (text) or a playbook task is never
called a program, shown EVOLVE markers or asked for a ```python block; a program task is; the
frozen-region rule is stated only where the kind has one."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from evoforge.cognition.knowledge import Knowledge
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task, load_task
from evoforge.infra.artifacts.text import Text
from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.prompt_format import FORMAT_DIFF, FORMAT_REWRITE, extract_program, program_language
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.analysis_prompt import SYSTEM as ANALYSIS_SYSTEM
from evoforge.stages.analysis_prompt import analysis_messages
from evoforge.stages.debug import repair_messages
from evoforge.stages.judge import judge_messages
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.history import NEW_BEST, PoolHistory
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.reflect import reflection_messages
from evoforge.stages.research_prompt import research_messages, stable_prefix
from evoforge.stages.sample import make_sampler
from evoforge.stages.sample.inspirations import BEST, Inspiration

TASKS = {name: load_task(name) for name in ("circle_packing", "tour_files", "house_style", "unit_playbook")}
_EXTRA = {"program": "# a note\n", "files": "# a note\n", "text": "Be exact.\n",
          "playbook": "[strat-9] helpful=0 harmful=0 :: Check the units.\n"}
_PROGRAM_WORDS = re.compile(r"(?i:\bprograms?\b)|EVOLVE|```python")  # "evolved" (lower case) is fine


def _child(task: Task) -> str:
    return task.initial_code + _EXTRA[task.kind]


def _node(task: Task, node_id: str, code: str, **kw) -> Node:
    return Node(id=node_id, run_id="r", code=code, status=EVALUATED, score_full=1.0,
                motivation=f"design of {node_id}", metrics={"combined_score": 1.0}, **kw)


def _text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def _all_prompts(task: Task) -> dict[str, list[dict[str, str]]]:
    """The research (both forms), analysis, reflection, repair and judge messages of `task`."""
    parent = _node(task, "seed", task.initial_code, owned={"analyze": AnalysisData(report="It scored 1.0.")})
    child_code = _child(task)
    inspiration = Inspiration(_node(task, "insp", child_code), BEST)
    knowledge = [Knowledge(id="k1", title="Start simple", text="Small steps first.",
                           provenance="human seed", score=0.5)]
    diff = task.artifact.diff(task.initial_code, child_code)
    best = _node(task, "best", child_code, parent_id="seed", diff=diff)
    pool = Pool()
    pool.add(parent)
    pool.add(best)
    history = PoolHistory()
    history.record(pool.v, NEW_BEST, best)
    cfg = RunConfig()
    ctx = RunView("r", task, cfg, OfflineBackend(), pool, make_sampler(cfg.search), random.Random(0),
                       SandboxLimits(), Path("."), history=history)
    item = Item(v_i=1, parent=parent)
    item.node = _node(task, "cand", child_code, parent_id="seed", diff=diff)
    crashed = item.node.copy(status=FAILED, error="evaluator raised ValueError: bad",
                             artifacts={"traceback": "Traceback ...\nValueError: bad"})
    return {
        "research diff": research_messages(task, parent, [inspiration], FORMAT_DIFF, knowledge,
                                           feedback="[case-1] Too long."),
        "research rewrite": research_messages(task, parent, [inspiration], FORMAT_REWRITE, knowledge),
        "analysis": analysis_messages(item, ctx),
        "reflect": reflection_messages(item, ctx, history),
        "debug": repair_messages(task, crashed),
        "judge": judge_messages(best, task),
    }


@pytest.mark.parametrize("name", ["house_style", "unit_playbook"])
def test_a_prompt_or_playbook_task_is_never_called_a_program(name):
    task = TASKS[name]
    for stage, messages in _all_prompts(task).items():
        found = _PROGRAM_WORDS.findall(_text(messages))
        assert found == [], f"{stage} prompt of {name} says {found}"
        assert task.artifact.noun in _text(messages), stage  # it names what it is instead
    assert _PROGRAM_WORDS.findall(ANALYSIS_SYSTEM) == []  # the batched analysis prompt's: any kind


def test_a_program_task_speaks_of_its_program_evolve_block_and_python():
    prompts = _all_prompts(TASKS["circle_packing"])
    for stage, messages in prompts.items():
        assert re.search(r"\bprogram", _text(messages)), stage
    for stage in ("research diff", "research rewrite", "reflect", "debug"):
        assert "EVOLVE-BLOCK-START" in prompts[stage][0]["content"], stage  # the frozen rule, in the system
    assert "```python" in _text(prompts["research rewrite"])
    assert "EVOLVE blocks of other evaluated programs" in _text(prompts["research diff"])


def test_the_frozen_region_rule_is_stated_only_where_the_kind_has_one():
    for name, frozen in (("circle_packing", True), ("tour_files", True), ("house_style", False),
                         ("unit_playbook", False)):
        system = _all_prompts(TASKS[name])["research diff"][0]["content"]
        assert ("EVOLVE-BLOCK-START" in system) is frozen, name


def test_each_kind_asks_for_its_own_answer_form():
    text, playbook, files = (stable_prefix(TASKS[n]) for n in ("house_style", "unit_playbook", "tour_files"))
    assert "```text fenced block" in text and "SEARCH/REPLACE" in text  # a prompt: plain text, both forms
    assert '```json block {"operations"' in playbook and "SEARCH/REPLACE" not in playbook  # only deltas
    assert "rewrite:" not in playbook
    assert "### FILE: <path>" in files and "rewrite: under a `### FILE: <path>` line" in files
    playbook_task = TASKS["unit_playbook"]
    parent = _node(playbook_task, "p", playbook_task.initial_code)
    last = research_messages(playbook_task, parent, [], FORMAT_REWRITE)[-1]["content"]
    assert last.rstrip().splitlines()[-1] == ("Answer format: rewrite (delta operations in one ```json "
                                              "block, as described above)")


def test_the_offline_answerers_still_find_the_artifact_under_its_kind_header():
    for name, fence in (("house_style", "prompt"), ("unit_playbook", "playbook"),
                        ("circle_packing", "python")):
        task = TASKS[name]
        prompt = _text(_all_prompts(task)["research diff"])
        assert f"## Current {task.artifact.noun}\n```{fence}\n" in prompt
        assert extract_program(prompt) == task.initial_code and program_language(prompt) == fence


def test_a_new_kind_gets_its_wording_from_its_class():
    class Recipe(Text):
        noun = "recipe"
        expert = "an expert cook"

    kind = Recipe(program_name="recipe.md", language="text")
    assert kind.system_rules() == ("You are an expert cook improving a recipe through careful, "
                                   "testable changes.")
    assert kind.show("Boil.").startswith("## Current recipe\n") and "other evaluated recipes" in \
        kind.inspiration_header()
    assert "the current recipe" in kind.answer_forms()
