"""Evaluation levels load from task.yaml, and the level and parameter values reach the evaluator."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from evoforge.evaluators.evaluation import COMPAT_DIR, EvalOutcome, evaluate_program
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import EvalLevel, Task, TaskError, load_task
from evoforge.stages.evaluation.job import EvalRequest, run_evaluation

PROGRAM = "x = 1\n# EVOLVE-BLOCK-START\ny = 2\n# EVOLVE-BLOCK-END\n"
PLAIN = "def evaluate(program_path):\n    return {'combined_score': 1.0}\n"
LEVELLED = "def evaluate(program_path, level='full'):\n    return {'combined_score': 1.0}\n"
THREE_LEVELS = "levels:\n  pilot: {data_fraction: 0.25}\n  full: {}\n  final:\n"

# reports what reached it: the level, the environment the harness set, and the program's knobs
REPORTING_EVALUATOR = '''
import importlib.util
import json
import os

def evaluate(program_path, level="full", params=None):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    env_params = json.loads(os.environ.get("EVOFORGE_PARAMS", "{}"))
    return {
        "combined_score": module.C * module.DEPTH,
        "C": module.C,
        "depth": module.DEPTH,
        "poly": float(module.KERNEL == "poly"),
        "env_C": env_params.get("C", -1.0),
        "kwarg_C": (params or {}).get("C", -1.0),
        "pilot": float(level == "pilot" and os.environ["EVOFORGE_LEVEL"] == "pilot"),
        "fraction": float(os.environ.get("EVOFORGE_DATA_FRACTION", -1.0)),
        "params_file_left": float(any(name.endswith("params.json") for name in os.listdir("."))),
        "depth_is_int": float(isinstance(module.DEPTH, int)),
    }
'''
KNOB_PROGRAM = '''
try:
    from evoforge_knobs import knob
except ImportError:  # run outside evoforge: every knob takes its default
    def knob(name, default, **_):
        return default

# EVOLVE-BLOCK-START
C = knob("C", 1.0, low=1e-3, high=1e3, log=True)
DEPTH = knob("depth", 3, low=1, high=12)
KERNEL = knob("kernel", "rbf", choices=["rbf", "poly"])
# EVOLVE-BLOCK-END
'''


def make_task(root: Path, evaluator: str, yaml_text: str | None = None, program: str = PROGRAM) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "initial_program.py").write_text(program)
    (root / "evaluator.py").write_text(evaluator)
    if yaml_text is not None:
        (root / "task.yaml").write_text(yaml_text)
    return root


def task_error(root: Path) -> str:
    with pytest.raises(TaskError) as info:
        load_task(root)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_task_without_stages_has_only_full(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t", PLAIN))
    assert task.levels == (EvalLevel("full", None),)
    assert not task.gated and not task.has_final and task.search_level == "full"
    assert task.level("full") == EvalLevel("full", None)
    with pytest.raises(KeyError, match="pilot"):
        task.level("pilot")


def test_declared_stages_are_read_in_evaluation_order(tmp_path: Path) -> None:
    yaml_text = "levels:\n  final: {}\n  full:\n  pilot: {data_fraction: 0.1}\n"
    task = load_task(make_task(tmp_path / "t", LEVELLED, yaml_text))
    assert task.levels == (EvalLevel("pilot", 0.1), EvalLevel("full", None), EvalLevel("final", None))
    assert task.gated and task.has_final and task.search_level == "pilot"
    assert task.level("pilot").data_fraction == 0.1


def test_full_and_final_without_pilot_search_on_full(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t", LEVELLED, "levels: {full: {}, final: {}}\n"))
    assert not task.gated and task.has_final and task.search_level == "full"


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("levels: {warmup: {}, full: {}}\n", "'warmup'"),
        ("levels: {pilot: {fraction: 0.1}, full: {}}\n", "'fraction'"),
        ("levels: {full: {data_fraction: 0.5}}\n", "'data_fraction'"),
        ("levels: {pilot: {data_fraction: 0}, full: {}}\n", "levels.pilot.data_fraction"),
        ("levels: {pilot: {data_fraction: 1.5}, full: {}}\n", "levels.pilot.data_fraction"),
        ("levels: {pilot: {data_fraction: half}, full: {}}\n", "levels.pilot.data_fraction"),
        ("levels: {pilot: {data_fraction: true}, full: {}}\n", "levels.pilot.data_fraction"),
        ("levels: {pilot: {data_fraction: 0.1}}\n", "'full' is required"),
        ("levels: [pilot, full]\n", "levels must be a mapping"),
        ("levels: {pilot: 0.1, full: {}}\n", "levels.pilot must be a mapping"),
    ],
)
def test_bad_stages_fail_naming_the_key(tmp_path: Path, yaml_text: str, expected: str) -> None:
    message = task_error(make_task(tmp_path / "t", LEVELLED, yaml_text))
    assert "task.yaml" in message and expected in message


def test_stages_need_a_stage_aware_evaluator(tmp_path: Path) -> None:
    message = task_error(make_task(tmp_path / "t", PLAIN, THREE_LEVELS))
    assert "level-aware" in message and "level=" in message


def test_stages_cannot_be_combined_with_a_cascade(tmp_path: Path) -> None:
    evaluator = LEVELLED + "def evaluate_stage1(program_path):\n    return {'combined_score': 1.0}\n"
    assert "cascade" in task_error(make_task(tmp_path / "t", evaluator, THREE_LEVELS))


def test_params_keyword_is_detected(tmp_path: Path) -> None:
    assert load_task(make_task(tmp_path / "a", REPORTING_EVALUATOR)).params_aware
    assert not load_task(make_task(tmp_path / "b", LEVELLED)).params_aware


@pytest.fixture
def reporting_task(tmp_path: Path) -> Task:
    return load_task(make_task(tmp_path / "task", REPORTING_EVALUATOR, THREE_LEVELS, KNOB_PROGRAM))


def evaluate(task: Task, scratch: Path, **kwargs: object) -> EvalOutcome:
    scratch.mkdir(exist_ok=True)
    outcome = asyncio.run(evaluate_program(task, task.initial_code, scratch_root=scratch, **kwargs))
    assert outcome.ok, outcome.error
    return outcome


def test_stage_and_params_reach_the_evaluator_and_the_knobs(reporting_task: Task, tmp_path: Path) -> None:
    params = {"C": 2.5, "depth": 7.0, "kernel": "poly"}
    outcome = evaluate(reporting_task, tmp_path / "scratch", level="pilot", params=params)
    metrics = outcome.metrics
    assert outcome.score == 2.5 * 7
    assert metrics["C"] == metrics["env_C"] == metrics["kwarg_C"] == 2.5
    assert metrics["depth"] == 7 and metrics["depth_is_int"] == 1.0 and metrics["poly"] == 1.0
    assert metrics["pilot"] == 1.0 and metrics["fraction"] == 0.25
    assert metrics["params_file_left"] == 0.0  # the harness deletes the file once read
    assert isinstance(outcome.cpu_s, float) and outcome.cpu_s > 0


def test_without_params_every_knob_takes_its_default(reporting_task: Task, tmp_path: Path) -> None:
    metrics = evaluate(reporting_task, tmp_path / "scratch", level="full").metrics
    assert (metrics["C"], metrics["depth"], metrics["poly"]) == (1.0, 3, 0.0)
    assert metrics["env_C"] == metrics["kwarg_C"] == -1.0
    assert metrics["pilot"] == 0.0 and metrics["fraction"] == -1.0  # full declares no fraction


def test_an_eval_request_carries_params_to_the_evaluator(reporting_task: Task, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    request = EvalRequest(node_id="n", code=reporting_task.initial_code, task=reporting_task,
                          limits=SandboxLimits(timeout_s=30), scratch=scratch, level="pilot",
                          params={"C": 4.0})
    report = asyncio.run(run_evaluation(request))
    assert report.outcome.ok, report.outcome.error
    assert report.outcome.metrics["kwarg_C"] == 4.0 and report.outcome.score == 12.0
    assert report.outcome.cpu_s is not None and report.outcome.cpu_s > 0


def test_a_failing_evaluation_still_reports_cpu_seconds(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t", "def evaluate(program_path):\n    raise ValueError('no')\n"))
    (tmp_path / "scratch").mkdir()
    outcome = asyncio.run(evaluate_program(task, task.initial_code, scratch_root=tmp_path / "scratch"))
    assert not outcome.ok and "ValueError" in (outcome.error or "")
    assert outcome.cpu_s is not None and outcome.cpu_s > 0


@pytest.fixture
def knobs(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The sandbox's knob runtime, loaded in this process (EVOFORGE_PARAMS cleared)."""
    monkeypatch.delenv("EVOFORGE_PARAMS", raising=False)
    spec = importlib.util.spec_from_file_location("evoforge_knobs", COMPAT_DIR / "evoforge_knobs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_knobs_return_defaults_without_params(knobs: ModuleType) -> None:
    assert knobs.knob("C", 1.0, low=1e-3, high=1e3, log=True) == 1.0
    assert knobs.knob("kernel", "rbf", choices=["rbf", "poly"]) == "rbf"
    assert knobs.knob("depth", 3, low=1, high=12) == 3


def test_knobs_read_params_and_int_knobs_return_ints(
    knobs: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOFORGE_PARAMS", json.dumps({"C": 5, "depth": 6.0, "kernel": "poly", "k": 2}))
    c = knobs.knob("C", 1.0, low=1e-3, high=1e3, log=True)
    assert c == 5.0 and isinstance(c, float)
    depth = knobs.knob("depth", 3, low=1, high=12)
    assert depth == 6 and isinstance(depth, int)
    assert knobs.knob("kernel", "rbf", choices=["rbf", "poly"]) == "poly"
    assert knobs.knob("k", 1, choices=[1, 2, 4]) == 2
    assert knobs.knob("absent", 0.5, low=0.0, high=1.0) == 0.5


@pytest.mark.parametrize(
    ("params", "declaration", "expected"),
    [
        ({"kernel": "linear"}, ("kernel", "rbf", {"choices": ["rbf", "poly"]}), "not one of"),
        ({"C": "big"}, ("C", 1.0, {"low": 0.1, "high": 10.0}), "not a finite number"),
        ({"C": 50.0}, ("C", 1.0, {"low": 0.1, "high": 10.0}), "outside"),
        ({}, ("C", 1.0, {"low": 0.0, "high": 10.0, "log": True}), "positive low"),
        ({}, ("C", 20.0, {"low": 0.1, "high": 10.0}), "outside"),
        ({}, ("kernel", "rbf", {}), "choices"),
    ],
)
def test_bad_knob_values_and_declarations_raise(
    knobs: ModuleType, monkeypatch: pytest.MonkeyPatch, params: dict, declaration: tuple, expected: str
) -> None:
    monkeypatch.setenv("EVOFORGE_PARAMS", json.dumps(params))
    name, default, options = declaration
    with pytest.raises(knobs.KnobError, match=expected):
        knobs.knob(name, default, **options)
