"""Every hostile program of the corpus is contained, recorded with its reason, and harms nothing.

The corpus (tests/hostile_corpus.py) runs through the real sandbox, as a candidate of a small
task, both cold (a fresh Python per candidate) and warm (forked from the task's fork server).
Beyond each verdict, the host is checked: no file planted outside the candidate's directory
(in a world-writable folder, so only the read-only mounts stop it), no connection reached the
test's server, the secret in this process's environment never shows, this process is alive, and
no process the candidate started is left once its evaluation has ended. Every evaluation runs as
if started from ``$HOME`` (the working directory and the first import path entry), with a canary
planted in ``~/.ssh``, in a world-readable workspace inside a folder the candidate may read
(``expose``) and in another evaluation's directory: no candidate reads any of them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.evaluators.isolation import availability, scratch_root
from evoforge.evaluators.sandbox import SandboxLimits, describe_isolation
from evoforge.evaluators.task import Task, load_task
from tests.helpers import RUN_EVALUATOR
from tests.hostile_corpus import (
    CORPUS,
    SECRET,
    Hostile,
    Planted,
    harms,
    probe_problems,
    program_text,
    require_isolation,
    verdict_problems,
)

EVALUATOR = RUN_EVALUATOR
LIMITS = SandboxLimits(timeout_s=8.0, memory_mb=768, max_procs=32, max_file_mb=64, scratch_mb=96)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    root = tmp_path_factory.mktemp("hostile") / "task"
    root.mkdir()
    (root / "evaluator.py").write_text(EVALUATOR)
    (root / "initial_program.py").write_text(
        "# EVOLVE-BLOCK-START\ndef run():\n    return {'combined_score': 1.0}\n# EVOLVE-BLOCK-END\n")
    return load_task(root)


class _Listener:
    """A local TCP server standing for the LLM server; counts the connections it accepted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[_Listener]:
    server = _Listener()
    yield server
    server.sock.close()


@pytest.fixture
def outside() -> Iterator[Path]:
    """A world-writable folder outside the candidate's directory."""
    path = Path("/tmp") / f"evoforge-hostile-outside-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Planted]:
    """A canary in ``~/.ssh``, in a workspace (world-readable, inside a folder the candidates may
    read) and in another evaluation's directory of the scratch root; all removed afterwards."""
    canary = f"EVOFORGE-CANARY-{uuid.uuid4().hex[:16]}"
    home = Path(os.path.expanduser("~")).resolve()
    ssh = home / ".ssh"
    made_ssh = not ssh.exists()
    ssh.mkdir(mode=0o700, exist_ok=True)
    key = ssh / f"id_evoforge_canary_{canary[-8:]}"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{canary}\n")
    repo = tmp_path_factory.mktemp("checkout")
    workspace = repo / "evoforge-runs"
    for path, text in {"mlflow.db": canary, "run-a/nodes.duckdb": f"DUCK{canary}DUCK",
                       "run-a/nodes/n1/program.py": f"# {canary}\n"}.items():
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / path).write_text(text)
    for path in (repo, *repo.rglob("*")):  # readable by anyone: only the covers stop a candidate
        path.chmod(0o755 if path.is_dir() else 0o644)
    other = scratch_root() / f"evoforge-eval-planted-{canary[-8:]}"
    other.mkdir(mode=0o755)
    other.chmod(0o755)
    (other / "initial_program.py").write_text(f"# {canary}\n")
    (other / "initial_program.py").chmod(0o644)
    try:
        yield Planted(canary, home, workspace, scratch_root(), other)
    finally:
        key.unlink()
        if made_ssh:
            ssh.rmdir()
        shutil.rmtree(other, ignore_errors=True)


@pytest.fixture
def from_home(planted: Planted, monkeypatch: pytest.MonkeyPatch) -> SandboxLimits:
    """Evaluations as a run started from ``$HOME`` makes them, with ``planted``'s workspace."""
    monkeypatch.chdir(planted.home)
    monkeypatch.setattr(sys, "path", [str(planted.home), *sys.path])
    return replace(LIMITS, expose=(str(planted.workspace.parent),), hide=(str(planted.workspace),))


def _evaluate(task: Task, code: str, limits: SandboxLimits = LIMITS) -> EvalOutcome:
    return asyncio.run(evaluate_program(task, code, limits=limits))


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("hostile", CORPUS, ids=[h.name for h in CORPUS])
def test_hostile_program_is_contained(hostile: Hostile, warm: bool, task: Task, listener: _Listener,
                                      outside: Path, planted: Planted, from_home: SandboxLimits,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    require_isolation()
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    marker = f"hostile-{uuid.uuid4().hex[:10]}"
    accepted_before = listener.accepted

    limits = replace(from_home, warm=warm)
    outcome = _evaluate(task, program_text(hostile, outside, listener.port, marker, planted), limits)

    assert verdict_problems(hostile, outcome.ok, outcome.score, outcome.error) == []
    seen = outcome.stdout_tail + outcome.stderr_tail + (outcome.error or "") + repr(outcome.artifacts)
    assert harms(outside, marker, listener.accepted - accepted_before, seen) == []
    assert planted.canary not in seen
    assert probe_problems(hostile, outcome.stdout_tail, planted.canary) == [], outcome.stdout_tail
    harmless = Hostile("ok", 'return {"combined_score": 2.0}', "harmless")
    assert _evaluate(task, program_text(harmless, outside, listener.port, marker), limits).score == 2.0


def test_status_names_the_isolation_in_use() -> None:
    described = describe_isolation()
    avail = availability()
    assert described["isolation"] == avail.kind
    if avail.kind == "root-uid":
        assert described["network"] == "denied (own network namespace)"
        assert described["user"].startswith("dedicated uid 57000-57127")
    elif avail.kind == "userns":
        assert described["network"] == "denied (own network namespace)"
        assert described["processes"].startswith("out of sight (own pid namespace")
    else:
        assert described["network"] == "allowed"
        assert avail.reason in described["user"] and avail.missing
    assert described["process_limit"] in ("cgroup-pids", "rlimit-nproc", "none")


def test_an_exposed_path_is_readable_and_the_rest_of_its_closed_folder_is_not(task: Task) -> None:
    require_isolation()
    closed = Path("/tmp") / f"evoforge-closed-{uuid.uuid4().hex[:8]}"
    (closed / "toolchain").mkdir(parents=True)
    closed.chmod(0o700)
    (closed / "toolchain" / "version.txt").write_text("1.2.3")
    (closed / "credentials").write_text(SECRET)
    body = (f"tool = open('{closed}/toolchain/version.txt').read()\n"
            f"try:\n    open('{closed}/credentials').read()\n    leaked = 1.0\n"
            f"except OSError:\n    leaked = 0.0\n"
            "return {'combined_score': float(tool == '1.2.3') - leaked}")
    code = program_text(Hostile("expose", body, "harmless"), closed, 0, "none")
    try:
        limits = replace(LIMITS, expose=(str(closed / "toolchain"),))
        exposed = asyncio.run(evaluate_program(task, code, limits=limits))
        hidden = _evaluate(task, code)
    finally:
        shutil.rmtree(closed)
    assert exposed.score == 1.0, exposed.error
    assert not hidden.ok, hidden.error  # behind a closed folder (root-uid) or a cover (userns)
    assert "Permission denied" in (hidden.error or "") or "No such file" in (hidden.error or ""), hidden.error


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_candidate_that_fills_its_scratch_fails_alone(warm: bool, task: Task) -> None:
    require_isolation()
    filler = next(h for h in CORPUS if h.name == "fill_scratch")
    harmless = Hostile("ok", 'with open("out.bin", "wb") as f:\n    f.write(bytes(32 * 2**20))\n'
                             'return {"combined_score": 2.0}', "harmless")
    limits = replace(LIMITS, warm=warm)

    async def both() -> list[EvalOutcome]:
        codes = [program_text(h, Path("/nonexistent"), 0, "none") for h in (filler, harmless, harmless)]
        return list(await asyncio.gather(*(evaluate_program(task, c, limits=limits) for c in codes)))

    filled, *others = asyncio.run(both())
    assert not filled.ok and "No space left on device" in (filled.error or ""), filled.error
    assert [o.score for o in others] == [2.0, 2.0], [o.error for o in others]
    assert _evaluate(task, program_text(harmless, Path("/nonexistent"), 0, "none"), limits).score == 2.0
