"""The sandbox contains every hostile program when evoforge runs as an ordinary user, too.

CI runs as root, where candidates run as dedicated uids. These tests create an ordinary user
(tests/unprivileged.py) and run the same hostile tests as that user, where the sandbox isolates
with user namespaces (evaluators/userns.py): the corpus through the sandbox, cold and warm; a
whole ``evoforge run`` whose LLM proposes every hostile program, with an API key in its
environment that no file of the run may hold; the task-model link, an inherited descriptor, across
the namespaces. Where the kernel forbids user namespaces, the run says so in one line at start.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from evoforge.evaluators.isolation import availability
from evoforge.evaluators.isolation_notice import isolation_notices
from tests.helpers import read_nodes
from tests.hostile_corpus import CORPUS
from tests.unprivileged import REPO, ensure_user, fresh_user_home, python, run_as_user, user_env, value_task


@pytest.fixture
def home() -> Iterator[Path]:
    """The test user's home for one test (these tests make a user: root only, as in CI)."""
    folder = fresh_user_home()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)  # the user's runs' files, pytest's own aside


def _pytest_as_user(home: Path, *args: str, forbid_userns: bool = False) -> subprocess.CompletedProcess[str]:
    env = user_env(home, CI="true", EVOFORGE_TEST_ISOLATION="none" if forbid_userns else "userns")
    return run_as_user([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], home,
                       env=env, forbid_userns=forbid_userns)


def _counts(done: subprocess.CompletedProcess[str]) -> dict[str, int]:
    last = (done.stdout.strip().splitlines() or [""])[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", last)}


def test_the_hostile_corpus_is_contained_as_an_ordinary_user(home: Path) -> None:
    done = _pytest_as_user(home, "tests/test_hostile_corpus.py")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert _counts(done) == {"passed": 2 * len(CORPUS) + 4}, done.stdout[-2000:]


@pytest.mark.slow
def test_a_run_as_an_ordinary_user_survives_every_hostile_candidate(home: Path) -> None:
    done = _pytest_as_user(home, "tests/test_hostile_run.py")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert _counts(done) == {"passed": 1}, done.stdout[-2000:]


def test_a_run_started_from_home_shows_its_candidates_no_key_and_no_workspace(home: Path) -> None:
    """``python -m evoforge.flows.cli run`` from ``$HOME`` (the working directory: the first import
    path entry) into ``./evoforge-runs``: the candidate that reads ``~/.ssh/id_rsa`` and every
    run's database finds nothing, and no file of the workspace holds the key."""
    user = ensure_user()
    canary = f"EVOFORGE-CANARY-{os.urandom(8).hex()}"
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{canary}\n")
    older = home / "evoforge-runs" / "older-run" / "nodes.duckdb"
    older.parent.mkdir(parents=True)
    older.write_text(f"DUCK{canary}DUCK")
    task = home / "task"
    task.mkdir()
    (task / "evaluator.py").write_text(textwrap.dedent("""
        import importlib.util
        def evaluate(program_path):
            spec = importlib.util.spec_from_file_location("p", program_path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.run()
    """))
    (task / "initial_program.py").write_text(textwrap.dedent(f"""
        import glob, re
        # EVOLVE-BLOCK-START
        def run():
            read, missed = 0, 0
            for path in ["{home}/.ssh/id_rsa", *glob.glob("{home}/evoforge-runs/*/nodes.duckdb"),
                         *glob.glob("{home}/evoforge-runs/*/nodes/*/program.py")]:
                try:
                    found = re.findall(rb"EVOFORGE-CANARY-[0-9a-f]{{16}}", open(path, "rb").read())
                    print("READ", path, *found)
                    read += 1
                except OSError as exc:
                    print("MISSED", path, exc.strerror)
                    missed += 1
            return {{"combined_score": 1.0 - read, "files_read": float(read), "files_missed": float(missed)}}
        # EVOLVE-BLOCK-END
    """))
    (home / "config.yaml").write_text("cognition: {enabled: false}\ntracking: {mlflow: true}\n")
    for path in (home, *home.rglob("*")):
        os.chown(path, user.pw_uid, user.pw_gid)
    done = run_as_user([sys.executable, "-m", "evoforge.flows.cli", "run", str(task), "--config",
                        str(home / "config.yaml"), "--max-evals", "2", "--quiet"], home, cwd=home)
    assert done.returncode == 0, done.stderr[-3000:]
    workspace = home / "evoforge-runs"
    holding = [str(p) for p in workspace.rglob("*") if p.is_file() and canary.encode() in p.read_bytes()]
    assert holding == [str(older)]  # nodes.duckdb, mlflow.db, run files: only where it was planted
    assert (workspace / "mlflow.db").is_file() and (workspace / "task" / "nodes.duckdb").is_file()
    seed = next(n for n in read_nodes(workspace / "task") if n.origin == "seed")
    assert (seed.score_full, seed.metrics["files_read"]) == (1.0, 0.0), seed.error
    assert "MISSED" in seed.artifacts.get("stdout_tail", "") and "READ" not in seed.artifacts["stdout_tail"]


def test_the_task_model_link_works_inside_the_namespaces(home: Path) -> None:
    done = _pytest_as_user(home, "tests/test_task_model_link.py")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert _counts(done).get("passed", 0) > 0 and set(_counts(done)) == {"passed"}, done.stdout[-2000:]


def test_a_run_where_user_namespaces_are_forbidden_says_so_in_one_line(home: Path) -> None:
    task = value_task(home)
    workspace = home / "ws"
    (home / "config.yaml").write_text("cognition: {enabled: false}\n")
    done = run_as_user([sys.executable, "-m", "evoforge.flows.cli", "run", str(task), "--workspace",
                        str(workspace), "--config", str(home / "config.yaml"), "--max-evals", "2",
                        "--quiet"], home, forbid_userns=True)
    assert done.returncode == 0, done.stderr[-3000:]
    notices = [line for line in done.stderr.splitlines() if line.startswith("[evoforge] sandbox:")]
    assert notices == ["[evoforge] sandbox: no network/filesystem/process isolation: unprivileged user "
                       "namespaces are disabled (user.max_user_namespaces = 0: sysctl -w "
                       "user.max_user_namespaces=15000, or run as root)"], done.stderr[-3000:]
    # run.log opens after the notice was printed: the run writes the same line there
    run_log = (workspace / "task" / "run.log").read_text()
    assert notices[0].removeprefix("[evoforge] ") in run_log, run_log[-3000:]
    assert "user same as evoforge (unprivileged user namespaces are disabled (user.max_user_namespaces" \
        in run_log, run_log[-3000:]


def test_two_users_evaluate_at_once_each_in_a_scratch_root_of_its_own(home: Path) -> None:
    user = ensure_user()
    code = textwrap.dedent(f"""
        import asyncio, os, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from evoforge.evaluators.evaluation import evaluate_program
        from evoforge.evaluators.isolation import scratch_root
        from evoforge.evaluators.task import load_task
        program = "import time\\n# EVOLVE-BLOCK-START\\ndef run():\\n    time.sleep(1.5)\\n" \\
                  "    return {{'combined_score': 4.0}}\\n# EVOLVE-BLOCK-END\\n"
        outcome = asyncio.run(evaluate_program(load_task(sys.argv[1]), program))
        root = scratch_root()
        print(outcome.score, root, oct(root.stat().st_mode & 0o777), root.stat().st_uid)
    """)
    task = home / "task"
    task.mkdir()
    (task / "evaluator.py").write_text(
        "import importlib.util\ndef evaluate(path):\n"
        "    spec = importlib.util.spec_from_file_location('p', path)\n"
        "    m = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(m)\n    return m.run()\n")
    (task / "initial_program.py").write_text(
        "# EVOLVE-BLOCK-START\ndef run():\n    return {'combined_score': 1.0}\n# EVOLVE-BLOCK-END\n")
    for path in (task, *task.iterdir()):
        os.chown(path, user.pw_uid, user.pw_gid)
    mine = subprocess.Popen([sys.executable, "-c", code, str(task)], cwd=REPO, env={**os.environ},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    theirs = run_as_user([*python(code), str(task)], home)
    out, err = mine.communicate(timeout=300)
    assert mine.returncode == 0, err[-2000:]
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    assert out.split()[0] == "4.0" and out.split()[3] == "0"
    score, root, mode, owner = theirs.stdout.split()
    assert (score, mode, int(owner)) == ("4.0", "0o700", user.pw_uid)
    assert root.endswith(f"evoforge-sandbox-{user.pw_uid}") and root != out.split()[1]


def test_a_scratch_root_that_is_not_the_users_own_is_refused(home: Path, tmp_path: Path) -> None:
    user = ensure_user()
    shared = Path("/tmp") / f"evoforge-shared-{os.getpid()}"
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)
    try:
        (shared / f"evoforge-sandbox-{user.pw_uid}").symlink_to(tmp_path)  # planted by someone else
        done = run_as_user(python("from evoforge.evaluators.isolation import scratch_root; scratch_root()"),
                           home, env=user_env(home, TMPDIR=str(shared)))
    finally:
        (shared / f"evoforge-sandbox-{user.pw_uid}").unlink()
        shared.rmdir()
    assert done.returncode != 0
    assert "is not a directory (a symlink?): refusing to use it" in done.stderr.strip().splitlines()[-1]


def test_a_run_with_full_isolation_prints_no_notice_and_one_without_says_why() -> None:
    avail = availability()
    notices = isolation_notices(True)
    if avail.kind in ("root-uid", "userns"):
        assert notices == [] and avail.missing == ()
    else:
        assert notices == [f"[evoforge] sandbox: {line}" for line in avail.missing] and notices
    assert isolation_notices(False) == ["[evoforge] sandbox: no network/filesystem/process isolation: "
                                        "sandbox.isolate is false (set it true to isolate)"]


def test_a_module_in_the_candidates_folder_does_not_run_before_the_isolation(home: Path) -> None:
    """The cold launcher that makes the namespaces is a Python run unconfined: a module of the
    candidate's folder (in its PYTHONPATH and working directory) must not shadow one it imports."""
    user = ensure_user()
    planted = Path("/tmp") / f"evoforge-shadow-{os.getpid()}"
    task = home / "task"
    task.mkdir()
    (task / "ctypes.py").write_text(f"open({str(planted)!r}, 'w').write('ran unconfined')\n"
                                    "raise ImportError('shadow')\n")
    (task / "evaluator.py").write_text(
        "def evaluate(path):\n    return {'combined_score': 3.0}\n")
    (task / "initial_program.py").write_text(
        "# EVOLVE-BLOCK-START\ndef run():\n    return {}\n# EVOLVE-BLOCK-END\n")
    for path in (task, *task.iterdir()):
        os.chown(path, user.pw_uid, user.pw_gid)
    code = textwrap.dedent("""
        import asyncio, sys
        from evoforge.evaluators.evaluation import evaluate_program
        from evoforge.evaluators.sandbox import SandboxLimits
        from evoforge.evaluators.task import load_task
        task = load_task(sys.argv[1])
        outcome = asyncio.run(evaluate_program(task, task.initial_code, limits=SandboxLimits(warm=False)))
        print(outcome.score, outcome.error)
    """)
    try:
        done = run_as_user([*python(code), str(task)], home)
        assert not planted.exists(), planted.read_text()
    finally:
        planted.unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == "3.0", done.stdout
