"""A tuned candidate's program is parsed once, however many stages and sinks ask for its knob
space, and its trials JSON is built once for the two sinks that record it."""

from __future__ import annotations

import json

from evoforge.evaluators.task import load_task
from evoforge.infra import pyast
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.engineer import owned_knobs
from evoforge.stages.population.item import Item
from evoforge.stages.population.repeats import knob_space
from evoforge.stages.research import declares_knobs
from evoforge.stages.sinks.mlflow_sink import trials_text
from evoforge.stages.tuning import param_space, param_study
from evoforge.stages.tuning.param_space import hardcoded_values, parse_space
from evoforge.stages.tuning.param_study import StudyResult, TrialRecord, trials_json

PARENT = 'x = knob("x", 0.5, low=0.0, high=1.0)\ny = knob("y", 2, low=1, high=9)\n'
CHILD = PARENT + "z = x * y  # child 1\n"


def _study() -> StudyResult:
    trial = TrialRecord(number=0, params={"x": 0.5, "y": 2}, value=1.0, state="COMPLETE", error=None,
                        seconds=0.1, cpu_s=0.1, source="default")
    return StudyResult(best_params={"x": 0.5, "y": 2}, best_value=1.0, trials=[trial], ran_now=0,
                       saturation={})


def test_every_call_site_of_one_candidate_shares_one_parse(monkeypatch):
    parsed: list[str] = []
    real_parse = pyast.parse

    def counting(source: str, filename: str = "<unknown>"):
        parsed.append(source)
        return real_parse(source, filename)

    monkeypatch.setattr(pyast, "parse", counting)
    parse_space.cache_clear()
    pyast.parse_program.cache_clear()
    task = load_task("circle_packing")
    parent = Node(id="p", run_id="r", code=PARENT, status=EVALUATED, score_full=1.0)
    child = Node(id="c", run_id="r", code=CHILD, parent_id="p", status=EVALUATED, score_full=1.0)
    item = Item(v_i=0, parent=parent, node=child)

    # what one tuned candidate goes through: research, the engineer, param search, both sinks
    assert declares_knobs(child)
    space = knob_space(child.code, task)
    assert space.names == ("x", "y") and owned_knobs(item) == {"x", "y"}
    assert hardcoded_values(child.code, owned_knobs(item)) == []
    assert parse_space(child.code) is space  # param search's skip test and its study
    study = _study()
    written = trials_json(study, child.id, parse_space(child.code))  # the trials file
    assert trials_text(child, study) is written  # the MLflow sink: the same text, not rebuilt
    assert json.loads(written)["space"][0]["name"] == "x"

    assert parsed.count(CHILD) == 1 and parsed.count(PARENT) == 1
    assert parse_space.cache_info().misses == 2  # the child's program and its parent's


def test_the_trials_json_is_built_once_per_study_and_node(monkeypatch):
    dumps: list[int] = []
    real_dumps = json.dumps

    def counting(*args, **kwargs):
        dumps.append(1)
        return real_dumps(*args, **kwargs)

    monkeypatch.setattr(param_study.json, "dumps", counting)
    study, space = _study(), param_space.parse_space(PARENT)
    first = trials_json(study, "n1", space)
    assert trials_json(study, "n1", space) is first and len(dumps) == 1
    trials_json(study, "n2", space)  # another node's file is its own text
    assert len(dumps) == 2
