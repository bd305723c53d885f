"""The debug stage: a candidate whose evaluation crashed gets LLM repairs (up to
`guard.repair_attempts`) and goes back to the engineer; timeouts, invalid results and everything
else pass through unchanged."""

from __future__ import annotations

import asyncio
import hashlib
import random
import time

import pytest

from evoforge.evaluators.task import load_task
from evoforge.infra.config import RunConfig
from evoforge.infra.edits import apply_answer, parse_answer
from evoforge.infra.llm_sim.answers import build_answer
from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, PRUNED, ROLLED_BACK, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.algorithms import asi_evolve
from evoforge.stages.debug import (
    CRASH,
    INVALID,
    NOT_FAILED,
    TIMEOUT,
    Debug,
    RepairData,
    classify_failure,
    repair_messages,
)
from evoforge.stages.engineer import Engineer
from evoforge.stages.pipeline.stage import COMMIT, StageResult
from evoforge.stages.population.item import Item
from tests.guard_tasks import EVALUATOR, candidate_item, engineered, make_ctx, make_task, with_block
from tests.scripted_llm import Scripted

RAISES = '''"""A program whose first version crashes."""


# EVOLVE-BLOCK-START
def solve():
    return 1.0 / 0.0
# EVOLVE-BLOCK-END


def run():
    return solve()
'''

FIX = """Dividing by zero crashes the run; return a finite value instead.

<<<<<<< SEARCH
    return 1.0 / 0.0
=======
    return 2.0
>>>>>>> REPLACE
"""

REWRITE_FIX = "Return a constant instead.\n\n```python\ndef solve():\n    return 2.0\n```\n"

STILL_BROKEN = """Try another expression.

<<<<<<< SEARCH
    return 1.0 / 0.0
=======
    raise RuntimeError("still broken")
>>>>>>> REPLACE
"""


def _traceback(*files: str) -> str:
    frames = "".join(f'  File "/tmp/evoforge-eval-x/{name}", line 7, in f\n    x = g()\n' for name in files)
    return f"Traceback (most recent call last):\n{frames}ZeroDivisionError: division by zero"


def _failed(error: str, traceback: str = "", **changes) -> Node:
    """A node whose evaluation failed with `error` (and `traceback` as its artifact)."""
    node = Node(id="n", run_id="r", code=RAISES, status=FAILED, failed_stage="engineer", error=error,
                evaluated_at=time.time(), eval_s=0.25, motivation="divide things")
    if traceback:
        node.artifacts["traceback"] = traceback
    node.artifacts["stderr_tail"] = "warning: something on stderr"
    for key, value in changes.items():
        if key == "attempts":
            RepairData.of(node).attempts = value
        else:
            setattr(node, key, value)
    return node


@pytest.mark.parametrize(
    ("node", "kind"),
    [
        (_failed("evaluator raised ZeroDivisionError: division by zero (in evaluate(), initial_program.py:7)",
                 _traceback("harness.py", "evaluator.py", "initial_program.py")), CRASH),
        (_failed("evaluator raised ValueError: bad (in evaluate(), fromnumeric.py:88)",
                 _traceback("evaluator.py", "initial_program.py", "numpy/core/fromnumeric.py")), CRASH),
        (_failed("evaluator raised ValueError: circle 3 overlaps circle 7 by 0.00123",
                 _traceback("harness.py", "initial_program.py", "evaluator.py")), INVALID),
        (_failed("quick test: evaluator raised ZeroDivisionError (in quick_test(), initial_program.py:7)",
                 _traceback("evaluator.py", "initial_program.py"), failed_stage="guard"), CRASH),
        (_failed("case 3 failed: evaluator raised KeyError (in evaluate_case('3'), initial_program.py:7)",
                 _traceback("evaluator.py", "initial_program.py")), CRASH),
        (_failed("killed by SIGSEGV (segmentation fault)"), CRASH),
        (_failed("killed by SIGKILL (killed from outside, e.g. by the OOM killer)"), CRASH),
        (_failed("exited with code 3 without writing a result"), CRASH),
        (_failed("timed out after 30.0 s"), TIMEOUT),
        (_failed("quick test: timed out after 5.0 s", failed_stage="guard"), TIMEOUT),
        (_failed("killed by SIGXCPU (CPU time limit of 60 s exceeded)"), TIMEOUT),
        (_failed("metric 'combined_score' is not finite (nan)"), INVALID),
        (_failed("evaluator reported error: the packing is invalid"), INVALID),
        (_failed("quick test: quick_test() reported ok=False", failed_stage="guard"), INVALID),
        (_failed("static check: syntax: invalid syntax (line 7)", failed_stage="guard",
                 evaluated_at=None), NOT_FAILED),
        (_failed("LLM call failed: HTTP 500", failed_stage="research", evaluated_at=None), NOT_FAILED),
        (_failed("internal error in the engineer stage: KeyError: 'x'", evaluated_at=None), NOT_FAILED),
        (_failed("", status=PRUNED, failed_stage=None), NOT_FAILED),
        (_failed("", status=ROLLED_BACK, failed_stage=None), NOT_FAILED),
        (_failed("", status=EVALUATED, failed_stage=None), NOT_FAILED),
    ],
)
def test_the_classifier_tells_a_crash_from_a_timeout_an_invalid_result_and_the_rest(node, kind):
    assert classify_failure(node, ("initial_program.py",)) == kind


@pytest.fixture
def task(tmp_path):
    return make_task(tmp_path / "raises", program=RAISES, task_yaml=None)


def _debugged(item: Item, ctx) -> StageResult:
    """Run the debug stage and apply its result to the item, as the engine does."""
    result = asyncio.run(Debug().run(item, ctx))
    item.apply(result.node, result.updates)
    return result


def _crashed_item(task) -> Item:
    item = candidate_item(task, task.initial_code)
    item.node = _failed("evaluator raised ZeroDivisionError: division by zero (in evaluate(), "
                        "initial_program.py:6)", _traceback("evaluator.py", "initial_program.py"),
                        id="cand", parent_id="seed", tokens_in=7, llm_s=1.0)
    return item


def test_a_crashed_candidate_is_repaired_and_routed_back_to_the_engineer(task, tmp_path):
    llm = Scripted(FIX)
    item, ctx = _crashed_item(task), make_ctx(task, tmp_path, llm=llm)
    crashed = item.node
    result = _debugged(item, ctx)
    node = item.node
    assert result.to == "engineer" and node is not crashed and crashed.status == FAILED  # a copy
    assert node.status == PROPOSED and "return 2.0" in node.code and "1.0 / 0.0" not in node.code
    assert "+    return 2.0" in node.diff and node.diff.startswith("--- parent")
    assert node.error is None and node.failed_stage is None and node.evaluated_at is None
    assert node.artifacts == {} and node.metrics == {}
    assert (node.llm_s, node.tokens_in, node.tokens_out, node.eval_s) == (1.5, 107, 20, 0.25)
    [attempt] = RepairData.peek(node).attempts
    assert attempt["error"] == crashed.error and attempt["eval_s"] == "0.250"
    assert attempt["code_sha"] == hashlib.sha256(RAISES.encode()).hexdigest()[:16]
    assert "ZeroDivisionError" in attempt["traceback"] and attempt["stderr_tail"].startswith("warning")
    assert attempt["repair"].startswith("Dividing by zero")
    [prompt] = llm.prompts
    assert crashed.error in prompt and "initial_program.py" in prompt and "warning: something" in prompt
    assert "## Current program\n```python\n" + RAISES.rstrip() in prompt and "Answer format: diff" in prompt


def test_the_engineer_lets_a_repaired_candidate_past_the_staleness_policy(task, tmp_path):
    ctx = make_ctx(task, tmp_path)
    ctx.config.staleness.policy = "guarded"
    item = candidate_item(task, task.initial_code)
    item.v_i = ctx.pool.v - 5  # far too old for the guarded policy
    assert Engineer().admit(item, ctx).to == COMMIT
    RepairData.of(item.node).attempts.append({"error": "boom"})
    assert Engineer().admit(item, ctx).admitted


@pytest.mark.parametrize(("llm", "reason"), [
    (Scripted("I would divide by something else, but I give no edit."), "repair failed: unusable answer"),
    (Scripted(None), "repair failed: LLM call failed: HTTP 500 after 3 attempts"),
])
def test_an_unusable_repair_keeps_the_candidate_failed_with_both_reasons(task, tmp_path, llm, reason):
    item = _crashed_item(task)
    crashed = item.node
    result = _debugged(item, make_ctx(task, tmp_path, llm=llm))
    node = item.node
    assert result.to is None and node.status == FAILED and node.code == crashed.code
    assert node.error.startswith(crashed.error + "; ") and reason in node.error
    assert node.was_evaluated and node.failed_stage == "engineer" and node.llm_s >= 1.0
    attempts = RepairData.peek(node).attempts
    assert len(attempts) == 1 and attempts[0]["repair"].startswith("failed: ")


def test_timeouts_invalid_results_and_spent_attempts_pass_through_unchanged(task, tmp_path):
    llm = Scripted(FIX)
    ctx = make_ctx(task, tmp_path, llm=llm)
    spent = _failed("exited with code 3 without writing a result", attempts=[{"error": "first"}])
    for node in (_failed("timed out after 10.0 s"), _failed("metric 'combined_score' missing"), spent,
                 _failed("", status=EVALUATED, failed_stage=None)):
        item = Item(v_i=0, parent=node, node=node)
        result = _debugged(item, ctx)
        assert result.to is None and result.node is node and item.node is node
    assert llm.prompts == []


def test_the_stage_plugs_in_behind_the_engineer_when_repairs_are_on():
    cfg = RunConfig()
    assert Debug().enabled(cfg) and cfg.guard.repair_attempts == 1
    routes = asi_evolve.pipeline().routes({"research", "engineer", "debug"})
    assert routes == {"research": "engineer", "engineer": "debug", "debug": COMMIT}
    assert Debug().task_run_name == "debug-{label}"
    assert Debug().workers(cfg).initial == cfg.engine.workers["research"]  # an LLM stage
    cfg.guard.repair_attempts = 0
    assert not Debug().enabled(cfg)


def test_the_offline_proposer_and_the_simulator_answer_a_repair_prompt(task):
    node = _crashed_item(task).node
    messages = repair_messages(task, node)
    offline = asyncio.run(OfflineBackend(seed=3).complete(messages, temperature=1.0, max_tokens=500))
    simulated = build_answer(messages[-1]["content"], random.Random(3))
    for text in (offline.text, simulated):
        assert apply_answer(node.code, parse_answer(text)) != node.code


def _run_engineer_and_debug(item, ctx):
    node = engineered(item, ctx)
    return node, _debugged(item, ctx)


@pytest.mark.parametrize("quick_test", [False, True])
def test_end_to_end_a_crashing_first_program_is_repaired_and_evaluated(tmp_path, quick_test):
    yaml = "quick_test: {function: quick_test, timeout_s: 5}\n" if quick_test else None
    task = make_task(tmp_path / "t", program=RAISES, task_yaml=yaml)
    llm = Scripted(FIX)
    ctx = make_ctx(task, tmp_path, llm=llm)
    item = candidate_item(task, task.initial_code)
    first, result = _run_engineer_and_debug(item, ctx)
    assert first.status == FAILED and "ZeroDivisionError" in first.error
    assert first.failed_stage == ("guard" if quick_test else "engineer")
    assert first.error.startswith("quick test: ") == quick_test
    assert classify_failure(first, task.artifact.names()) == CRASH
    assert result.to == "engineer" and item.node.status == PROPOSED
    assert Engineer().admit(item, ctx).admitted
    second, result = _run_engineer_and_debug(item, ctx)
    assert second.status == EVALUATED and second.score_full == 2.0 and second.was_evaluated
    assert result.to is None and item.node is second  # passed through the debug stage unchanged
    [attempt] = RepairData.peek(second).attempts
    assert "ZeroDivisionError" in attempt["error"] and "initial_program.py" in attempt["traceback"]
    assert second.eval_s > float(attempt["eval_s"]) > 0 and second.llm_s == 0.5


def test_end_to_end_a_repair_that_crashes_again_fails_once_the_attempts_are_spent(task, tmp_path):
    ctx = make_ctx(task, tmp_path, llm=Scripted(STILL_BROKEN))
    item = candidate_item(task, task.initial_code)
    _run_engineer_and_debug(item, ctx)
    second, result = _run_engineer_and_debug(item, ctx)
    assert second.status == FAILED and "still broken" in second.error and result.to is None
    attempts = RepairData.peek(second).attempts
    assert len(attempts) == 1 and "ZeroDivisionError" in attempts[0]["error"]


@pytest.mark.parametrize(
    ("block", "kind"),
    [
        ("def solve():\n    import ctypes\n    return ctypes.string_at(0)\n", CRASH),
        ("def solve():\n    import os\n    os._exit(3)\n", CRASH),
        ("def solve():\n    return float('nan')\n", INVALID),
        ("def solve():\n    while True:\n        pass\n", TIMEOUT),
    ],
)
def test_real_sandbox_failures_are_classified(tmp_path, block, kind):
    task = make_task(tmp_path / "t", program=RAISES, evaluator=EVALUATOR, task_yaml="timeout_s: 1\n")
    ctx = make_ctx(task, tmp_path, llm=Scripted(REWRITE_FIX))
    item = candidate_item(task, with_block(task, block))
    node = engineered(item, ctx)
    assert node.status == FAILED and classify_failure(node, task.artifact.names()) == kind, node.error
    result = _debugged(item, ctx)
    assert (result.to == "engineer") == (kind == CRASH)
    assert ("return 2.0" in item.node.code) == (kind == CRASH)


def test_an_invalid_circle_packing_is_not_repaired(tmp_path):
    task = load_task("circle_packing")
    wrong = task.initial_code.replace("return centers, radii, float(np.sum(radii))",
                                      "return centers[:5], radii, float(np.sum(radii))")
    node = engineered(candidate_item(task, wrong), make_ctx(task, tmp_path))
    assert node.failed_stage == "engineer" and node.error.startswith("evaluator raised ValueError")
    assert "centers has shape (5, 2), expected (26, 2)" in node.error
    assert classify_failure(node, task.artifact.names()) == INVALID  # the evaluator rejected it
