"""The sandbox contains hostile or broken candidates and the run goes on."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evoforge.evaluators.cgroup_pids import pids_cgroup_parent, process_limit_mechanism, sweep_stale
from evoforge.evaluators.evaluation import evaluate_program
from evoforge.evaluators.sandbox import (
    SandboxLimits,
    run_sandboxed,
)
from evoforge.evaluators.task import Task, load_task
from tests.helpers import RUN_EVALUATOR, processes_mentioning

EVALUATOR = RUN_EVALUATOR

SEED = """
# EVOLVE-BLOCK-START
def run():
    return {"combined_score": 1.0}
# EVOLVE-BLOCK-END
"""


@pytest.fixture
def task(tmp_path: Path) -> Task:
    root = tmp_path / "task"
    root.mkdir()
    (root / "evaluator.py").write_text(EVALUATOR)
    (root / "initial_program.py").write_text(SEED)
    (root / "data.txt").write_text("keep me\n")
    return load_task(root)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    path = tmp_path / "scratch"
    path.mkdir()
    return path


def program(body: str) -> str:
    """A candidate whose run() executes ``body``."""
    return "import os, sys, time\n# EVOLVE-BLOCK-START\ndef run():\n" + textwrap.indent(
        textwrap.dedent(body), "    "
    ) + "\n# EVOLVE-BLOCK-END\n"


def evaluate(task: Task, body: str, scratch: Path, **limits: float) -> object:
    lim = SandboxLimits(**{"timeout_s": 10.0, **limits})
    return asyncio.run(evaluate_program(task, program(body), limits=lim, scratch_root=scratch))


def our_cgroups() -> list[Path]:
    parent = pids_cgroup_parent()
    return list(parent.glob(f"evoforge-{os.getpid()}-*")) if parent else []


def test_good_candidate_scores(task: Task, scratch: Path) -> None:
    outcome = evaluate(task, 'return {"combined_score": 2.5, "label": "x", "flag": True}', scratch)
    assert outcome.ok, outcome.error
    assert outcome.score == 2.5
    assert outcome.metrics == {"combined_score": 2.5, "flag": 1.0}
    assert outcome.artifacts == {"label": "x"}
    assert list(scratch.iterdir()) == []  # the private workdir is gone


def test_infinite_loop_times_out(task: Task, scratch: Path) -> None:
    start = time.monotonic()
    outcome = evaluate(task, "while True:\n    pass", scratch, timeout_s=1.5)
    assert not outcome.ok
    assert outcome.error.startswith("timed out after 1.5 s")
    assert time.monotonic() - start < 1.5 + 3


def test_memory_bomb_fails_and_the_next_run_works(task: Task, scratch: Path) -> None:
    outcome = evaluate(task, "x = bytearray(8 * 1024**3)\nreturn {'combined_score': 1.0}",
                       scratch, memory_mb=512)
    assert not outcome.ok
    assert "MemoryError" in outcome.error and "512 MB" in outcome.error
    assert evaluate(task, "return {'combined_score': 3.0}", scratch).score == 3.0


def test_fork_bomb_is_contained_and_cleaned_up(task: Task, scratch: Path) -> None:
    assert process_limit_mechanism() != "none"
    body = "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    start = time.monotonic()
    outcome = evaluate(task, body, scratch, timeout_s=3.0, max_procs=32)
    assert not outcome.ok and "timed out" in outcome.error
    assert time.monotonic() - start < 3.0 + 5
    assert processes_mentioning(str(scratch)) == []
    assert our_cgroups() == []


def test_process_limit_caps_live_children(tmp_path: Path) -> None:
    """A child can't have more than max_procs live tasks, and all die with the run."""
    code = textwrap.dedent("""
        import json, os, time
        pids = []
        for _ in range(100):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            pids.append(pid)
        os.write(int(os.environ["EVOFORGE_RESULT_FD"]), json.dumps({"pids": pids}).encode())
    """)
    limits = SandboxLimits(timeout_s=10.0, max_procs=16)
    result = asyncio.run(run_sandboxed([sys.executable, "-c", code], tmp_path, limits))
    assert result.returncode == 0 and result.payload is not None
    pids = result.payload["pids"]
    assert 0 < len(pids) < 16
    time.sleep(0.2)
    alive = [p for p in pids if Path(f"/proc/{p}/cmdline").exists()
             and Path(f"/proc/{p}/cmdline").read_bytes()]
    assert alive == []
    assert our_cgroups() == []


def test_segfault_is_reported_as_sigsegv(task: Task, scratch: Path) -> None:
    outcome = evaluate(task, "import ctypes\nctypes.string_at(0)", scratch)
    assert not outcome.ok
    assert "SIGSEGV" in outcome.error


def test_sys_exit_in_the_program_fails_the_candidate(task: Task, scratch: Path) -> None:
    outcome = evaluate(task, "sys.exit(0)", scratch)
    assert not outcome.ok
    assert "sys.exit(0)" in outcome.error


def test_os_exit_without_result_fails_the_candidate(task: Task, scratch: Path) -> None:
    outcome = evaluate(task, "os._exit(3)", scratch)
    assert not outcome.ok
    assert "exited with code 3" in outcome.error


def test_stdout_flood_is_not_the_result_channel(task: Task, scratch: Path) -> None:
    body = "sys.stdout.write('x' * (5 * 1024 * 1024) + 'END')\nreturn {'combined_score': 1.5}"
    outcome = evaluate(task, body, scratch, output_bytes=4096)
    assert outcome.ok, outcome.error
    assert outcome.score == 1.5
    assert len(outcome.stdout_tail) == 4096 and outcome.stdout_tail.endswith("xEND")


def test_deleting_the_workdir_leaves_the_task_folder_alone(task: Task, scratch: Path) -> None:
    before = {p.name: p.read_bytes() for p in task.root.iterdir()}
    body = """
    for name in os.listdir("."):
        if os.path.isfile(name):
            os.remove(name)
    return {"combined_score": float(len(os.listdir(".")))}
    """
    outcome = evaluate(task, body, scratch)
    assert outcome.ok, outcome.error
    assert {p.name: p.read_bytes() for p in task.root.iterdir()} == before


def test_api_keys_do_not_reach_the_child(task: Task, scratch: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-evoforge-test-secret")
    body = """
    leaked = [k for k, v in os.environ.items() if "sk-evoforge-test-secret" in v]
    home_is_cwd = os.environ["HOME"] == os.getcwd()
    return {"combined_score": float(len(leaked)), "home_is_cwd": home_is_cwd,
            "keys": ",".join(sorted(os.environ))}
    """
    outcome = evaluate(task, body, scratch)
    assert outcome.ok, outcome.error
    assert outcome.score == 0.0
    assert "OPENAI_API_KEY" not in outcome.artifacts["keys"]
    assert outcome.metrics["home_is_cwd"] == 1.0


def test_background_children_are_killed_and_do_not_stall_the_run(
    task: Task, scratch: Path
) -> None:
    body = """
    import subprocess
    subprocess.Popen(["sleep", "30"], start_new_session=True)
    return {"combined_score": 1.0}
    """
    start = time.monotonic()
    outcome = evaluate(task, body, scratch)
    assert outcome.ok, outcome.error
    assert time.monotonic() - start < 5
    time.sleep(0.1)
    assert not [p for p in processes_mentioning("sleep\x0030")
                if str(scratch) in os.readlink(f"/proc/{p}/cwd")]


def test_concurrent_evaluations_overlap_and_keep_the_loop_free(task: Task, scratch: Path) -> None:
    async def both() -> tuple[list, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        code = program("time.sleep(1.5)\nreturn {'combined_score': 1.0}")
        outcomes = await asyncio.gather(
            *(evaluate_program(task, code, scratch_root=scratch) for _ in range(2))
        )
        tick_task.cancel()
        return outcomes, ticks

    start = time.monotonic()
    outcomes, ticks = asyncio.run(both())
    elapsed = time.monotonic() - start
    assert all(o.ok for o in outcomes)
    assert elapsed < 2 * 1.5  # serial would take at least 3 s
    assert ticks >= 20  # the event loop kept running while the children worked


def test_cancellation_kills_the_child_and_cleans_up(task: Task, scratch: Path) -> None:
    async def cancel_soon() -> None:
        job = asyncio.create_task(
            evaluate_program(task, program("while True:\n    pass"), scratch_root=scratch)
        )
        await asyncio.sleep(0.5)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    asyncio.run(cancel_soon())
    time.sleep(0.1)
    assert processes_mentioning(str(scratch)) == []
    assert our_cgroups() == []
    assert list(scratch.iterdir()) == []


def test_evaluator_reported_error_keeps_its_score_and_fails_without_one(task: Task, scratch: Path) -> None:
    outcome = evaluate(task, "return {'combined_score': 0.0, 'error': 'bad input'}", scratch)
    assert outcome.ok and outcome.score == 0.0  # recorded as OpenEvolve records it
    assert outcome.artifacts["error"] == "bad input"
    alone = evaluate(task, "return {'error': 'bad input'}", scratch)
    assert not alone.ok
    assert alone.error == "evaluator reported error: bad input"


def test_missing_or_nan_objective_fails_the_candidate(task: Task, scratch: Path) -> None:
    missing = evaluate(task, "return {'note': 'no numbers'}", scratch)
    assert not missing.ok
    assert missing.error.startswith("metric 'combined_score' missing from evaluator result")
    nan = evaluate(task, "return {'combined_score': float('nan')}", scratch)
    assert not nan.ok and "not finite" in nan.error


def test_result_pipe_garbage_is_no_result(tmp_path: Path) -> None:
    code = "import os; os.write(int(os.environ['EVOFORGE_RESULT_FD']), b'not json')"
    result = asyncio.run(run_sandboxed([sys.executable, "-c", code], tmp_path, SandboxLimits()))
    assert result.payload is None
    assert "without writing a result" in result.describe_failure()
    good = json.dumps({"ok": True})
    code = f"import os; os.write(int(os.environ['EVOFORGE_RESULT_FD']), {good!r}.encode())"
    result = asyncio.run(run_sandboxed([sys.executable, "-c", code], tmp_path, SandboxLimits()))
    assert result.payload == {"ok": True} and result.describe_failure() is None


def test_stale_cgroups_of_dead_runs_are_swept() -> None:
    parent = pids_cgroup_parent()
    if parent is None:
        pytest.skip("no pids cgroup here")
    stale = parent / "evoforge-999999-0"  # pid_max is far below 999999: that owner is dead
    stale.mkdir()
    sweep_stale(parent)
    assert not stale.exists()


def test_task_modules_are_not_shadowed_by_evoforge_files(tmp_path: Path, scratch: Path) -> None:
    root = tmp_path / "shadow"
    root.mkdir()
    (root / "initial_program.py").write_text(SEED)
    (root / "sandbox.py").write_text("VALUE = 7.0\n")  # same name as evaluators/sandbox.py
    (root / "evaluator.py").write_text(
        "from sandbox import VALUE\n\ndef evaluate(program_path, level='full'):\n"
        "    return {'combined_score': VALUE, 'pilot': float(level == 'pilot')}\n"
    )
    task = load_task(root)
    assert task.level_aware
    outcome = asyncio.run(evaluate_program(task, SEED, level="pilot", scratch_root=scratch))
    assert outcome.ok, outcome.error
    assert outcome.score == 7.0 and outcome.metrics["pilot"] == 1.0
