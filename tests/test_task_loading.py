"""Task folders load into Task objects, and broken ones fail with one clear line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evoforge.evaluators.task import (
    Task,
    TaskError,
    builtin_task_names,
    builtin_tasks_dir,
    load_task,
)

FIXTURE = Path(__file__).parent / "fixtures" / "openevolve_task"
PROGRAM = "x = 1\n# EVOLVE-BLOCK-START\ny = 2\n# EVOLVE-BLOCK-END\n"
EVALUATOR = "def evaluate(program_path):\n    return {'combined_score': 1.0}\n"


def make_task(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def task_error(spec: object) -> str:
    with pytest.raises(TaskError) as info:
        load_task(spec)
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_builtin_task_by_name_and_by_path() -> None:
    assert "circle_packing" in builtin_task_names()
    by_name = load_task("circle_packing")
    by_path = load_task(builtin_tasks_dir() / "circle_packing")
    assert by_name == by_path
    assert by_name.name == "circle_packing"
    assert by_name.program_name == "initial_program.py"
    assert by_name.evaluator_path == by_name.root / "evaluator.py"
    assert by_name.root.is_absolute()
    assert (by_name.objective, by_name.direction, by_name.timeout_s) == (
        "combined_score", "maximize", 30.0
    )
    assert "1e-6" in by_name.description
    assert by_name.sources == ("task.yaml",)
    assert not by_name.cascade and not by_name.level_aware


def test_openevolve_folder_maps_config_yaml() -> None:
    task = load_task(FIXTURE)
    assert task.name == "openevolve_task"
    assert task.cascade is True
    assert task.cascade_thresholds == (0.3, 0.6)
    assert task.timeout_s == 20.0
    assert task.description.startswith("You are an expert in optimisation.")
    assert task.sources == ("config.yaml (OpenEvolve, mapped)",)
    assert task.objective == "combined_score"


def test_task_yaml_overrides_openevolve_config(tmp_path: Path) -> None:
    root = tmp_path / "t"
    shutil.copytree(FIXTURE, root)
    (root / "task.yaml").write_text(
        "description: ours\ntimeout_s: 5\ncascade: false\n"
        "objective: {metric: reliability, direction: minimize}\n"
    )
    task = load_task(root)
    assert (task.description, task.timeout_s, task.cascade) == ("ours", 5.0, False)
    assert task.cascade_thresholds == ()
    assert (task.objective, task.direction) == ("reliability", "minimize")
    assert task.sources == ("task.yaml", "config.yaml (OpenEvolve, mapped)")
    assert task.better(1.0, 2.0) and not task.better(2.0, 1.0)


def test_cascade_defaults_on_without_config(tmp_path: Path) -> None:
    evaluator = EVALUATOR + "def evaluate_stage1(program_path):\n    return {}\n"
    task = load_task(make_task(tmp_path / "t", {"initial_program.py": PROGRAM,
                                                 "evaluator.py": evaluator}))
    assert task.cascade and task.cascade_thresholds == (0.5, 0.75, 0.9)
    assert task.sources == ()


def test_level_aware_evaluator_is_detected(tmp_path: Path) -> None:
    evaluator = "def evaluate(program_path, *, level='full'):\n    return {}\n"
    task = load_task(make_task(tmp_path / "t", {"initial_program.py": PROGRAM,
                                                 "evaluator.py": evaluator}))
    assert task.level_aware


def test_an_evaluator_taking_the_old_stage_parameter_is_refused_naming_level(tmp_path: Path) -> None:
    evaluator = "def evaluate(program_path, stage='full'):\n    return {}\n"
    with pytest.raises(TaskError) as info:
        load_task(make_task(tmp_path / "t", {"initial_program.py": PROGRAM, "evaluator.py": evaluator}))
    assert str(info.value) == ("evaluator.py: evaluate(program_path, stage=...) is now "
                               "evaluate(program_path, level=...) (pilot, full and final are "
                               "evaluation levels)")


def test_the_old_stages_key_of_task_yaml_is_refused_naming_levels(tmp_path: Path) -> None:
    evaluator = "def evaluate(program_path, level='full'):\n    return {}\n"
    root = make_task(tmp_path / "t", {"initial_program.py": PROGRAM, "evaluator.py": evaluator,
                                      "task.yaml": "stages:\n  pilot: {data_fraction: 0.1}\n  full: {}\n"})
    with pytest.raises(TaskError) as info:
        load_task(root)
    assert str(info.value) == ("task.yaml: 'stages' is now 'levels' (pilot, full and final are evaluation "
                               "levels; a stage is a pipeline stage)")


def test_single_marked_program_is_found(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", {"solver.py": PROGRAM, "helpers.py": "z = 3\n",
                                       "evaluator.py": EVALUATOR})
    assert load_task(root).program_name == "solver.py"


def test_unknown_task_yaml_key_is_named(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR,
                                       "task.yaml": "objectve: {metric: x}\n"})
    message = task_error(root)
    assert "task.yaml" in message and "'objectve'" in message and "objective" in message


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("timeout_s: -1\n", "timeout_s"),
        ("timeout_s: soon\n", "timeout_s"),
        ("objective: {metric: x, direction: up}\n", "direction"),
        ("objective: {metric: x, goal: max}\n", "'goal'"),
        ("cascade: yes please\n", "cascade"),
        ("cascade_thresholds: [0.5, high]\n", "cascade_thresholds"),
        ("program: missing.py\n", "missing.py"),
        ("program: ../evil.py\n", "program"),
        ("- a list\n", "mapping"),
        ("name: [unclosed\n", "invalid YAML"),
        ("cascade: true\n", "evaluate_stage1"),
    ],
)
def test_bad_task_yaml_values_fail(tmp_path: Path, yaml_text: str, expected: str) -> None:
    root = make_task(tmp_path / "t", {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR,
                                       "task.yaml": yaml_text})
    assert expected in task_error(root)


def test_missing_evaluator_fails(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", {"initial_program.py": PROGRAM})
    assert "evaluator.py" in task_error(root)


def test_evaluator_without_evaluate_or_with_bad_syntax_fails(tmp_path: Path) -> None:
    root = make_task(tmp_path / "a", {"initial_program.py": PROGRAM,
                                       "evaluator.py": "def score(p):\n    return {}\n"})
    assert "'evaluate" in task_error(root)
    root = make_task(tmp_path / "b", {"initial_program.py": PROGRAM,
                                       "evaluator.py": "def evaluate(p:\n"})
    assert "evaluator.py: syntax error at line 1" in task_error(root)


def test_program_without_markers_fails(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", {"initial_program.py": "x = 1\n", "evaluator.py": EVALUATOR})
    message = task_error(root)
    assert "initial_program.py" in message and "EVOLVE-BLOCK-START" in message


def test_program_with_two_start_markers_fails(tmp_path: Path) -> None:
    code = "# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n"
    root = make_task(tmp_path / "t", {"initial_program.py": code, "evaluator.py": EVALUATOR})
    assert "found 2 and 1" in task_error(root)


def test_no_program_found_fails(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", {"evaluator.py": EVALUATOR, "helpers.py": "x = 1\n"})
    assert "no program" in task_error(root)


def test_nonexistent_path_fails_with_one_line(tmp_path: Path) -> None:
    message = task_error(tmp_path / "nowhere")
    assert "not found" in message and "circle_packing" in message
    assert "not found" in task_error("no_such_builtin")


def test_task_is_frozen() -> None:
    task = load_task("circle_packing")
    with pytest.raises(AttributeError):
        task.timeout_s = 1.0  # type: ignore[misc]
    assert isinstance(task, Task)


def test_openevolve_cascade_flag_is_respected(tmp_path: Path) -> None:
    root = tmp_path / "off"
    shutil.copytree(FIXTURE, root)
    (root / "config.yaml").write_text("evaluator:\n  cascade_evaluation: false\nllm: {x: 1}\n")
    assert load_task(root).cascade is False
    plain = make_task(tmp_path / "plain", {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR,
                                            "config.yaml": "evaluator: {cascade_evaluation: true}\n"})
    assert load_task(plain).cascade is False  # no evaluate_stage1: OpenEvolve runs evaluate()


C_PROGRAM = ("#include <stdio.h>\n// EVOLVE-BLOCK-START\nint n = 3;\n// EVOLVE-BLOCK-END\n"
             "int main(void) { return n; }\n")


def test_non_python_program_is_found_with_its_language_and_guarded_by_its_markers(tmp_path: Path) -> None:
    from evoforge.stages.evaluation.guardrails import static_violation

    root = make_task(tmp_path / "c", {"initial_program.c": C_PROGRAM, "evaluator.py": EVALUATOR})
    task = load_task(root)
    assert (task.program_name, task.language, task.is_python) == ("initial_program.c", "c", False)
    assert static_violation(C_PROGRAM.replace("n = 3", "n = 4"), task) is None  # not parsed as Python
    frozen = static_violation(C_PROGRAM.replace("return n", "return 0"), task)
    assert frozen is not None and "outside the EVOLVE block" in str(frozen)
    (root / "config.yaml").write_text("language: CUDA\n")
    assert load_task(root).language == "cuda"
    (root / "initial_program.rs").write_text("// EVOLVE-BLOCK-START\n// EVOLVE-BLOCK-END\n")
    assert "several initial_program.* files" in task_error(root)
    (root / "task.yaml").write_text("program: initial_program.rs\n")
    (root / "config.yaml").unlink()
    assert load_task(root).language == "rust"


def test_openevolve_feature_dimensions_and_objective_fallback_are_read(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR,
                                       "config.yaml": "database:\n  feature_dimensions: [size, speed]\n"})
    task = load_task(root)
    assert task.feature_dimensions == ("size", "speed") and not task.objective_declared
    assert load_task(FIXTURE).feature_dimensions == ("complexity", "diversity")  # OpenEvolve's default
    (root / "task.yaml").write_text("objective: {metric: speed}\n")
    assert load_task(root).objective_declared
    (root / "config.yaml").write_text("database:\n  feature_dimensions: size\n")
    assert "database.feature_dimensions" in task_error(root)
