"""A whole `evoforge run` whose LLM proposes every hostile program survives, with each recorded.

The LLM here is a minimal OpenAI-compatible HTTP server of this test (no LLM can run here) that
answers every research request with the next program of the hostile corpus, as a full rewrite.
The run process holds OPENAI_API_KEY the way a user's does. Afterwards the run has finished its
budget, every corpus program was evaluated and recorded with its verdict and reason, and the
host shows no harm: no file of the workspace (nodes, run.log, MLflow) holds the API key. The run
is started from ``$HOME`` (``python -m``: the working directory is the first import path entry)
with the default workspace ``./evoforge-runs`` inside it, and a canary in ``~/.ssh/id_rsa``, in an
older run's ``nodes.duckdb`` and in another evaluation's directory: the snooping candidates read
none of them, and no file of the workspace holds the canary but the one planted. As root the
candidates run as dedicated uids; tests/test_unprivileged_corpus.py runs this module again as an
ordinary user, where they run in user namespaces.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path

from evoforge.evaluators.isolation import scratch_root
from evoforge.infra.nodes import EVALUATED
from evoforge.infra.nodestore import NodeStore
from tests.helpers import RUN_EVALUATOR
from tests.hostile_corpus import (
    CORPUS,
    SECRET,
    Planted,
    harms,
    probe_problems,
    program_text,
    require_isolation,
    verdict_problems,
)
from tests.json_handler import JsonHandler

EVALUATOR = RUN_EVALUATOR
RUN_KEY = SECRET + "-of-the-run"  # what the candidates hunt for is in it; their code holds only SECRET
TASK_YAML = "timeout_s: 5\n"
CONFIG = """
sandbox: {memory_mb: 768, max_procs: 32, scratch_mb: 320}
engine: {workers: {research: 2, engineer: 2}}
guard: {repair_attempts: 0}
"""


class _HostileLLM(ThreadingHTTPServer):
    """Answers /v1/models and /v1/chat/completions; each completion is the next program."""

    def __init__(self, programs: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.programs, self.served, self.lock = programs, 0, threading.Lock()

    def answer(self, request: dict) -> str:
        """The next program for a research request; a plain remark for any other request."""
        if "## How to answer" not in json.dumps(request.get("messages", [])):
            return "Nothing to add."
        with self.lock:
            program = self.programs[self.served % len(self.programs)]
            self.served += 1
        return f"Try this.\n```python\n{program}```\n"


class _Handler(JsonHandler):

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._send({"object": "list", "data": [{"id": "hostile", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        text = self.server.answer(request)  # type: ignore[attr-defined]
        self._send({"id": "x", "object": "chat.completion", "created": 0, "model": "hostile",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})


def test_a_run_survives_every_hostile_candidate(tmp_path: Path) -> None:
    require_isolation()
    marker = f"hostile-{uuid.uuid4().hex[:10]}"
    outside = Path("/tmp") / f"evoforge-hostile-outside-{marker}"
    outside.mkdir()
    outside.chmod(0o777)
    task = tmp_path / "hostile_task"
    task.mkdir()
    (task / "evaluator.py").write_text(EVALUATOR)
    (task / "task.yaml").write_text(TASK_YAML)
    (task / "initial_program.py").write_text(
        "import os, sys\n# EVOLVE-BLOCK-START\ndef run():\n    return {'combined_score': 0.5}\n"
        "# EVOLVE-BLOCK-END\n")
    (tmp_path / "config.yaml").write_text(CONFIG)
    planted = _plant(tmp_path / "home", marker)
    listener = _HostileLLM([])  # also the local server the socket candidate tries to reach
    programs = [program_text(h, outside, listener.server_address[1], marker, planted) for h in CORPUS]
    listener.programs = programs
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    env = {**os.environ, "OPENAI_API_KEY": RUN_KEY, "HOME": str(planted.home)}
    try:
        done = subprocess.run(  # from $HOME, into the default workspace ./evoforge-runs
            [sys.executable, "-m", "evoforge.flows.cli", "run", str(task),
             "--config", str(tmp_path / "config.yaml"), "--max-evals", str(len(CORPUS) + 1),
             "--llm-base-url", f"http://127.0.0.1:{listener.server_address[1]}/v1",
             "--llm-model", "hostile",
             "--quiet"],
            capture_output=True, text=True, env=env, timeout=900, cwd=planted.home)
    finally:
        listener.shutdown()
        shutil.rmtree(planted.other, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    with NodeStore(planted.workspace / "hostile_task" / "nodes.duckdb", read_only=True) as store:
        nodes = {n.code: n for n in store.all()}
    problems = {}
    for hostile, program in zip(CORPUS, programs, strict=True):
        node = nodes.get(program)
        assert node is not None, f"{hostile.name} was never evaluated"
        ok = node.status == EVALUATED
        stdout = node.artifacts.get("stdout_tail", "")
        problems[hostile.name] = (verdict_problems(hostile, ok, node.score_full, node.error)
                                  + probe_problems(hostile, stdout, planted.canary))
    assert problems == {h.name: [] for h in CORPUS}
    assert listener.served >= len(CORPUS)
    assert harms(outside, marker, 0, done.stdout + done.stderr) == []
    assert _files_holding(RUN_KEY, planted.workspace) == []  # nodes, run.log, MLflow, run files
    older = str(planted.workspace / "older-run" / "nodes.duckdb")
    assert _files_holding(planted.canary, planted.workspace) == [older]  # only where it was planted
    assert (planted.workspace / "mlflow.db").is_file()
    outside.rmdir()  # empty: nothing was planted


def _plant(home: Path, marker: str) -> Planted:
    """A home with a canary in ``~/.ssh/id_rsa``, an older run in its ``./evoforge-runs`` and another
    evaluation's directory in the scratch root, each holding the canary, readable by anyone."""
    canary = f"EVOFORGE-CANARY-{uuid.uuid4().hex[:16]}"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{canary}\n")
    workspace = home / "evoforge-runs"
    (workspace / "older-run" / "nodes" / "n1").mkdir(parents=True)
    (workspace / "older-run" / "nodes.duckdb").write_text(f"DUCK{canary}DUCK")
    other = scratch_root() / f"evoforge-eval-planted-{marker}"
    other.mkdir()
    (other / "initial_program.py").write_text(f"# {canary}\n")
    for path in (home, *home.rglob("*"), other, *other.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return Planted(canary, home, workspace, scratch_root(), other)


def _files_holding(text: str, folder: Path) -> list[str]:
    """The files under ``folder`` whose bytes contain ``text``."""
    return [str(p) for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]
