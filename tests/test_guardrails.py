"""The engineer's guardrails: a static check stops broken candidates before any sandbox run, and
the task's quick test runs (in the sandbox, with its own timeout) before the full evaluation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evoforge.evaluators.evaluation import quick_test_program
from evoforge.evaluators.task import Constraints, QuickTest, TaskError, load_task
from evoforge.infra.nodes import EVALUATED, FAILED
from evoforge.stages.evaluation.guardrails import (
    GUARD,
    RULE_FORBIDDEN,
    RULE_FROZEN,
    RULE_REQUIRED,
    RULE_SYNTAX,
    static_violation,
)
from tests.guard_tasks import (
    EVALUATOR,
    NoSandbox,
    candidate_item,
    engineered,
    make_ctx,
    make_task,
    with_block,
)

GOOD_BLOCK = "def solve():\n    return 3.0\n\n\ndef helper():\n    return 1.0\n"


@pytest.fixture
def task(tmp_path):
    return make_task(tmp_path / "task")


def _stopped(task, code: str, tmp_path: Path) -> str:
    """Engineer `code`; assert it failed in the guard without reaching the sandbox; its error."""
    runner = NoSandbox()
    node = engineered(candidate_item(task, code), make_ctx(task, tmp_path, evaluations=runner))
    assert (node.status, node.failed_stage) == (FAILED, GUARD)
    assert node.evaluated_at is None and node.eval_s == 0.0 and not runner.requests
    assert node.error.startswith("static check: ")
    return node.error


def test_the_initial_program_and_an_edit_inside_the_block_pass(task):
    assert static_violation(task.initial_code, task) is None
    assert static_violation(with_block(task, GOOD_BLOCK), task) is None


def test_a_syntax_error_fails_before_any_sandbox_run(task, tmp_path):
    error = _stopped(task, with_block(task, "def solve(:\n    return 1\n"), tmp_path)
    assert error.startswith(f"static check: {RULE_SYNTAX}:") and "line 7" in error


def test_a_compile_time_error_counts_as_syntax(task):
    violation = static_violation(with_block(task, "return 1\n" + GOOD_BLOCK), task)
    assert violation is not None and violation.rule == RULE_SYNTAX and "outside function" in violation.detail


def test_a_rewrite_that_edits_outside_the_block_is_named(task, tmp_path):
    rewrite = with_block(task, GOOD_BLOCK).replace("return solve() + helper()", "return 100.0")
    error = _stopped(task, rewrite, tmp_path)
    assert error.startswith(f"static check: {RULE_FROZEN}:") and "EVOLVE-BLOCK-END" in error
    head_edit = with_block(task, GOOD_BLOCK).replace("import math", "import math, cmath")
    violation = static_violation(head_edit, task)
    assert violation.rule == RULE_FROZEN and "line 3 " in violation.detail


def test_outside_the_block_means_byte_for_byte(task):
    """Whitespace the edit format tolerates (a trailing blank line, CRLF) still breaks the rule."""
    for code in (task.initial_code + "\n", task.initial_code.replace("\n", "\r\n", 1)):
        violation = static_violation(code, task)
        assert violation is not None and violation.rule == RULE_FROZEN
    dropped = task.initial_code.replace("# EVOLVE-BLOCK-START\n", "")
    assert "markers" in static_violation(dropped, task).detail


def test_a_missing_required_name_fails_with_the_name(task, tmp_path):
    error = _stopped(task, with_block(task, "def solve():\n    return 3.0\n"), tmp_path)
    assert error == f"static check: {RULE_REQUIRED}: 'helper' is not defined at the top level of the program"
    nested = "def solve():\n    def helper():\n        return 1.0\n    return 3.0\n"
    assert static_violation(with_block(task, nested), task).rule == RULE_REQUIRED
    assigned = "def solve():\n    return 3.0\n\n\nhelper = solve\n"
    assert static_violation(with_block(task, assigned), task) is None


@pytest.mark.parametrize(
    ("statement", "module"),
    [
        ("import subprocess", "subprocess"),
        ("import socket as s", "socket"),
        ("from subprocess import run as go", "subprocess"),
        ("from os import system", "os.system"),
        ("import os.path, socket.x", "socket.x"),
        ("m = __import__('subprocess')", "subprocess"),
        ("m = importlib.import_module('socket')", "socket"),
    ],
)
def test_a_forbidden_import_anywhere_fails_with_the_module_named(task, tmp_path, statement, module):
    block = f"def solve():\n    {statement}\n    return 3.0\n\n\ndef helper():\n    return 1.0\n"
    error = _stopped(task, with_block(task, block), tmp_path)
    assert error.startswith(f"static check: {RULE_FORBIDDEN}: the program imports '{module}'")


def test_allowed_imports_pass(task):
    block = "import os\nimport subprocessing_helpers\n\n\n" + GOOD_BLOCK
    assert static_violation(with_block(task, block), task) is None


def test_task_yaml_declares_constraints_and_the_quick_test(task):
    assert task.constraints == Constraints(("solve", "helper", "run"), ("subprocess", "socket", "os.system"))
    assert task.quick_test == QuickTest("quick_test", 5.0)
    builtin = load_task("circle_packing")
    assert builtin.constraints.required_names == ("run_packing",)
    assert builtin.quick_test is None  # its full evaluation takes milliseconds: no quick test
    plain = make_task(task.root.parent / "plain", task_yaml=None)
    assert plain.constraints == Constraints() and plain.quick_test is None


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("constraints: [run]\n", "constraints must be a mapping"),
        ("constraints: {required: [run]}\n", "'required'"),
        ("constraints: {required_names: run}\n", "constraints.required_names"),
        ("constraints: {required_names: ['not a name']}\n", "constraints.required_names"),
        ("constraints: {forbidden_imports: [os..path]}\n", "constraints.forbidden_imports"),
        ("quick_test: quick_test\n", "quick_test must be a mapping"),
        ("quick_test: {timeout_s: 5}\n", "quick_test.function"),
        ("quick_test: {function: quick_test, timeout_s: 0}\n", "quick_test.timeout_s"),
        ("quick_test: {function: quick_test, timeout: 5}\n", "'timeout'"),
        ("quick_test: {function: smoke}\n", "'smoke'"),
    ],
)
def test_bad_constraints_or_quick_test_values_name_the_key(tmp_path, yaml_text, expected):
    with pytest.raises(TaskError) as info:
        make_task(tmp_path / "t", task_yaml=yaml_text)
    message = str(info.value)
    assert expected in message and "\n" not in message and message.startswith("task.yaml")


def test_the_quick_test_passes_and_fails_in_the_sandbox(task, tmp_path):
    passed = asyncio.run(quick_test_program(task, task.initial_code, scratch_root=tmp_path))
    assert passed.ok and passed.error is None and passed.metrics["value"] == 3.0
    negative = with_block(task, "def solve():\n    return -5.0\n\n\ndef helper():\n    return 1.0\n")
    failed = asyncio.run(quick_test_program(task, negative, scratch_root=tmp_path))
    assert not failed.ok and failed.error == "quick_test() reported ok=False"
    raising = with_block(task, "def solve():\n    return 1 / 0\n\n\ndef helper():\n    return 1.0\n")
    crashed = asyncio.run(quick_test_program(task, raising, scratch_root=tmp_path))
    assert not crashed.ok and "ZeroDivisionError" in crashed.error and "quick_test()" in crashed.error
    assert "initial_program.py" in crashed.artifacts["traceback"]


def test_the_quick_test_has_its_own_timeout(tmp_path):
    slow = EVALUATOR.replace("    value = _load(program_path).run()",
                             "    import time\n    time.sleep(30)\n    value = 1")
    task = make_task(tmp_path / "slow", evaluator=slow,
                     task_yaml="quick_test: {function: quick_test, timeout_s: 0.5}\n")
    outcome = asyncio.run(quick_test_program(task, task.initial_code, scratch_root=tmp_path))
    assert not outcome.ok and outcome.error.startswith("timed out after 0.5 s") and outcome.seconds < 5


def test_the_engineer_runs_the_quick_test_before_the_full_evaluation(task, tmp_path):
    node = engineered(candidate_item(task, with_block(task, GOOD_BLOCK)), make_ctx(task, tmp_path))
    assert node.status == EVALUATED and node.score_full == 4.0
    assert node.artifacts["quick_test"].startswith("passed in ")
    quick_s = float(node.artifacts["quick_test"].split()[2])
    assert node.eval_s > quick_s > 0


def test_a_failing_quick_test_fails_the_node_in_the_guard_and_counts_as_an_evaluation(task, tmp_path):
    negative = with_block(task, "def solve():\n    return -5.0\n\n\ndef helper():\n    return 1.0\n")
    node = engineered(candidate_item(task, negative), make_ctx(task, tmp_path))
    assert (node.status, node.failed_stage) == (FAILED, GUARD)
    assert node.error == "quick test: quick_test() reported ok=False"
    assert node.was_evaluated and node.eval_s > 0 and node.score_full is None
    # the full evaluation would have scored it; with the quick test off, it does
    off = engineered(candidate_item(task, negative), make_ctx(task, tmp_path, quick_test=False))
    assert off.status == EVALUATED and off.score_full == -4.0 and "quick_test" not in off.artifacts


def test_circle_packing_passes_its_static_check_and_an_edit_outside_the_block_does_not(tmp_path):
    task = load_task("circle_packing")
    assert static_violation(task.initial_code, task) is None
    renamed = task.initial_code.replace("def run_packing(", "def run_packing_renamed(")
    assert renamed != task.initial_code
    violation = static_violation(renamed, task)  # run_packing() lives outside the EVOLVE block
    assert violation is not None and violation.rule == "outside the EVOLVE block"


def test_the_guardrails_do_not_import_the_candidate(task, tmp_path):
    marker = tmp_path / "imported"
    block = f"open({str(marker)!r}, 'w').close()\n" + GOOD_BLOCK
    assert static_violation(with_block(task, block), task) is None and not marker.exists()
