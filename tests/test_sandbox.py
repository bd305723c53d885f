"""The sandbox contains hostile or broken candidates and the run goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from evoforge.evaluators.cgroup_pids import pids_cgroup_parent, process_limit_mechanism, sweep_stale
from evoforge.evaluators.evaluation import evaluate_program
from evoforge.evaluators.sandbox import (
    SandboxLimits,
    run_sandboxed,
    scratch_dir,
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


def wait_until(condition: Callable[[], object], timeout: float = 5.0) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass; whether it held. (A killed
    process leaves /proc a moment after the kill: this waits for that, and no longer.)"""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def alive(pid: int, command: str = "") -> bool:
    """Whether `pid` is a live process (a zombie's cmdline is empty) whose command line holds `command`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return bool(cmdline) and command in cmdline


def our_children_working_in(root: Path) -> dict[int, Path]:
    """Descendants of this process whose working directory is inside `root` (not `root` itself:
    a warm fork server waits there), by pid. An evaluation's child works in its own directory."""
    parents = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    ours, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - ours
        ours |= frontier
    found = {}
    for pid in ours:
        with contextlib.suppress(OSError):
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
            if cwd != root and cwd.is_relative_to(root):
                found[pid] = cwd
    return found


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

    def living() -> list[int]:
        return [pid for pid in pids if alive(pid)]

    assert wait_until(lambda: not living()), living()  # they sleep 60 s unless killed with the run
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
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    return {"combined_score": 1.0, "sleeper": sleeper.pid}
    """
    start = time.monotonic()
    outcome = evaluate(task, body, scratch)
    assert outcome.ok, outcome.error
    assert time.monotonic() - start < 5
    sleeper = int(outcome.metrics["sleeper"])  # it left its own session: killed with the run anyway
    assert wait_until(lambda: not alive(sleeper, "sleep\x0030")), f"`sleep 30` ({sleeper}) outlived the run"


def test_concurrent_evaluations_overlap_and_keep_the_loop_free(task: Task, scratch: Path) -> None:
    async def both() -> tuple[list, list[float]]:
        beats: list[float] = []  # when the event loop ran a heartbeat, while the children worked

        async def heartbeat() -> None:
            while True:
                beats.append(time.time())
                await asyncio.sleep(0.05)

        beating = asyncio.create_task(heartbeat())
        # each child works 1.5 s and reports (clock time) when it started and ended
        code = program("started = time.time()\ntime.sleep(1.5)\n"
                       "return {'combined_score': 1.0, 'started': started, 'ended': time.time()}")
        outcomes = await asyncio.gather(
            *(evaluate_program(task, code, scratch_root=scratch) for _ in range(2))
        )
        beating.cancel()
        return outcomes, beats

    outcomes, beats = asyncio.run(both())
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    both_from = max(o.metrics["started"] for o in outcomes)
    both_until = min(o.metrics["ended"] for o in outcomes)
    assert both_from < both_until  # the two children ran at the same time (serial: one ends first)
    # the event loop was free while both ran: its heartbeat went on inside that window
    assert len([t for t in beats if both_from < t < both_until]) >= 2, (both_from, both_until, beats)


def test_cancellation_kills_the_child_and_cleans_up(task: Task, scratch: Path) -> None:
    async def cancel_once_running() -> dict[int, Path]:
        root = await scratch_dir(scratch, SandboxLimits())  # isolated children work elsewhere
        job = asyncio.create_task(
            evaluate_program(task, program("while True:\n    pass"), scratch_root=scratch)
        )
        deadline = time.monotonic() + 10
        while not (running := our_children_working_in(root)):  # until the child runs in its workdir
            assert not job.done() and time.monotonic() < deadline, "the child never started"
            await asyncio.sleep(0.02)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        return running

    running = asyncio.run(cancel_once_running())
    assert wait_until(lambda: not any(alive(pid) for pid in running)), running
    assert not [workdir for workdir in running.values() if workdir.exists()]
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
