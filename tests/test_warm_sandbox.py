"""The warm sandbox: children forked from a per-task fork server, restarted when the task changes
or the server dies (the candidate it was running is evaluated again once, and that is recorded).
Its containment is tests/test_hostile_corpus.py, parametrised over cold and warm."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from evoforge.evaluators import isolation
from evoforge.evaluators.evaluation import SANDBOX_RETRY, evaluate_program
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task, load_task
from evoforge.evaluators.warm import WARM, ForkServer, preload_modules

EVALUATOR = """
import importlib.util
import json
import helpers_local

def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"combined_score": FACTOR * module.run()}

FACTOR = 1.0
"""
PROGRAM = """import os
# EVOLVE-BLOCK-START
def run():
    return 1.0 + (os.getppid() == {server_pid})
# EVOLVE-BLOCK-END
"""
LIMITS = SandboxLimits(timeout_s=20.0, memory_mb=768, max_procs=32)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    root = tmp_path / "task"
    root.mkdir()
    (root / "evaluator.py").write_text(EVALUATOR)
    (root / "helpers_local.py").write_text("VALUE = 1\n")
    (root / "initial_program.py").write_text(PROGRAM.format(server_pid=0))
    return load_task(root)


def _server(task: Task) -> ForkServer:
    return WARM._servers[task.root.resolve()]


def _evaluate(task: Task, code: str, limits: SandboxLimits = LIMITS):
    return asyncio.run(evaluate_program(task, code, limits=limits))


def test_the_preload_is_what_the_task_imports_but_its_own_modules(task: Task) -> None:
    assert preload_modules(task) == ["importlib.util", "json", "os"]
    assert "numpy" in preload_modules(load_task("circle_packing"))


def test_a_warm_child_is_forked_from_the_fork_server_and_scores_as_a_cold_one(task: Task) -> None:
    _evaluate(task, task.initial_code)  # starts the task's fork server
    pid = _server(task).proc.pid
    code = PROGRAM.format(server_pid=pid)
    warm = _evaluate(task, code)
    cold = _evaluate(task, code, replace(LIMITS, warm=False))
    assert warm.ok and warm.score == 2.0  # its parent is the fork server
    assert cold.ok and cold.score == 1.0  # started by this process
    assert _server(task).proc.pid == pid and warm.process_limit == cold.process_limit


def test_a_change_of_the_task_files_restarts_its_fork_server(task: Task) -> None:
    first = _evaluate(task, task.initial_code)
    old = _server(task).proc
    restarts = WARM.counts["restarted_task_changed"]
    evaluator = task.root / "evaluator.py"
    evaluator.write_text(EVALUATOR.replace("FACTOR = 1.0", "FACTOR = 3.0"))
    os.utime(evaluator, ns=(time.time_ns(), time.time_ns() + 10**9))  # a later mtime, surely

    second = _evaluate(task, task.initial_code)

    assert (first.score, second.score) == (1.0, 3.0)
    assert WARM.counts["restarted_task_changed"] == restarts + 1
    assert _server(task).proc.pid != old.pid
    assert old.poll() is not None  # the retired one exited once idle


def _started(marker: str) -> bool:
    """Whether a candidate wrote ``marker`` in its directory: seen through its working directory,
    since an isolated candidate writes into a tmpfs of its own mount namespace."""
    roots = [isolation.scratch_root(), Path(tempfile.gettempdir())]
    pids = [entry.name for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    return (any(os.path.exists(f"/proc/{pid}/cwd/{marker}") for pid in pids)
            or any(any(root.glob(f"evoforge-eval-*/{marker}")) for root in roots))


def test_a_crashed_fork_server_is_replaced_and_its_candidate_evaluated_again(task: Task) -> None:
    _evaluate(task, task.initial_code)
    old = _server(task).proc
    crashed, retried = WARM.counts["restarted_crashed"], WARM.counts["retried_candidates"]
    marker = f"started-{uuid.uuid4().hex[:8]}"
    code = ("import os, time\n# EVOLVE-BLOCK-START\ndef run():\n"
            f"    open('{marker}', 'w').close()\n    time.sleep(1.5)\n    return 5.0\n# EVOLVE-BLOCK-END\n")

    async def scenario():
        evaluation = asyncio.ensure_future(evaluate_program(task, code, limits=LIMITS))
        while not _started(marker):
            assert not evaluation.done(), evaluation.result()
            await asyncio.sleep(0.02)
        os.kill(old.pid, signal.SIGKILL)  # mid-evaluation
        return await evaluation

    outcome = asyncio.run(scenario())

    assert outcome.ok and outcome.score == 5.0, outcome.error
    assert "fork server" in outcome.artifacts[SANDBOX_RETRY]
    assert "killed by signal 9" in outcome.artifacts[SANDBOX_RETRY]
    assert WARM.counts["restarted_crashed"] == crashed + 1
    assert WARM.counts["retried_candidates"] == retried + 1
    assert _server(task).proc.pid != old.pid and _server(task).alive()


def test_a_fork_server_that_died_between_evaluations_is_replaced_without_a_retry(task: Task) -> None:
    _evaluate(task, task.initial_code)
    old = _server(task).proc
    retried = WARM.counts["retried_candidates"]
    old.kill()
    old.wait()

    outcome = _evaluate(task, task.initial_code)

    assert outcome.ok and outcome.score == 1.0 and SANDBOX_RETRY not in outcome.artifacts
    assert WARM.counts["retried_candidates"] == retried
    assert _server(task).proc.pid != old.pid


def test_status_says_whether_evaluations_are_warm(task: Task) -> None:
    _evaluate(task, task.initial_code)
    described = WARM.describe(True)
    assert described["warm"].startswith("on: each evaluation forks from a fork server")
    assert described["fork_servers"]["started"] >= 1
    assert WARM.describe(False)["warm"].startswith("off (sandbox.warm: false)")


def test_sandbox_warm_false_in_the_config_runs_every_evaluation_cold(task: Task) -> None:
    from evoforge.flows.session import sandbox_limits as _limits
    from evoforge.infra.config import RunConfig

    limits = _limits(task, RunConfig.model_validate({"sandbox": {"warm": False}}))
    assert limits.warm is False and _limits(task, RunConfig()).warm is True
    started = WARM.counts["started"]
    code = PROGRAM.format(server_pid=os.getpid())  # cold: its parent is this process
    outcome = _evaluate(task, code, replace(limits, timeout_s=20.0))
    assert outcome.ok and outcome.score == 2.0 and WARM.counts["started"] == started


def test_without_a_spare_in_a_pids_cgroup_the_evaluation_runs_cold_never_unlimited(
        task: Task, monkeypatch: pytest.MonkeyPatch) -> None:
    from evoforge.evaluators import warm
    from evoforge.evaluators.cgroup_pids import process_limit_mechanism

    if process_limit_mechanism() != "cgroup-pids":
        pytest.skip("no pids cgroup here: the server makes no spare")
    monkeypatch.setattr(warm, "pids_cgroup_parent", lambda: Path("/nonexistent/evoforge-pids"))
    WARM._drop(task.root.resolve())
    code = PROGRAM.format(server_pid=os.getpid())  # cold: its parent is this process

    outcome = _evaluate(task, code)

    assert outcome.ok and outcome.score == 2.0, outcome.error  # run cold, by this process
    assert outcome.process_limit.startswith("cgroup-pids")  # in a pids cgroup of its own
    WARM._drop(task.root.resolve())
