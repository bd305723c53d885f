"""Hostile candidates with and without the sandbox's isolation: how many are contained.

Runs every program of the test corpus (tests/hostile_corpus.py) through the real sandbox with
``isolate`` on (a dedicated uid, no network, read-only filesystem), cold (a fresh Python) and
warm (forked from the task's fork server), and with it off (rlimits, scrubbed environment, own
process group, pids cgroup only; warm). Each evaluation runs
in a child process of this script, holding a secret in its environment the way the run
process holds OPENAI_API_KEY, so that a candidate that kills its parent or the run process
kills that child, not the benchmark. A program is *contained* when its verdict is the expected
one and the host shows no harm afterwards. Usage::

    python bench/hostile.py            # prints one table
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers import RUN_EVALUATOR  # noqa: E402
from tests.hostile_corpus import CORPUS, SECRET, harms, program_text, verdict_problems  # noqa: E402

EVALUATOR = RUN_EVALUATOR


def _one(args: argparse.Namespace) -> None:
    """In the child: evaluate one program and print its outcome as JSON."""
    from evoforge.evaluators.evaluation import evaluate_program
    from evoforge.evaluators.sandbox import SandboxLimits
    from evoforge.evaluators.task import load_task

    limits = SandboxLimits(timeout_s=8.0, memory_mb=768, max_procs=32, max_file_mb=64,
                           isolate=args.isolate != "off", warm=args.isolate != "cold")
    outcome = asyncio.run(evaluate_program(load_task(Path(args.task)), Path(args.program).read_text(),
                                           limits=limits))
    print(json.dumps({"ok": outcome.ok, "score": outcome.score, "error": outcome.error,
                      "seen": outcome.stdout_tail + outcome.stderr_tail + repr(outcome.artifacts)}))


class _Listener:
    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port, self.accepted = self.sock.getsockname()[1], 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                self.sock.accept()[0].close()
            except OSError:
                return
            self.accepted += 1


def _trial(hostile, isolate: str, task: Path, listener: _Listener, scratch: Path) -> list[str]:
    outside = Path("/tmp") / f"evoforge-hostile-outside-{uuid.uuid4().hex[:8]}"
    outside.mkdir()
    outside.chmod(0o777)
    marker = f"hostile-{uuid.uuid4().hex[:10]}"
    program = scratch / f"{hostile.name}.py"
    program.write_text(program_text(hostile, outside, listener.port, marker))
    before = listener.accepted
    env = {**os.environ, "OPENAI_API_KEY": SECRET}
    done = subprocess.run([sys.executable, __file__, "--one", "--isolate", isolate, "--task", str(task),
                           "--program", str(program)], capture_output=True, text=True, env=env, timeout=120)
    try:
        if done.returncode != 0:
            problems = [f"the evaluating process died ({done.returncode}): the candidate killed it"]
        else:
            out = json.loads(done.stdout.strip().splitlines()[-1])
            problems = verdict_problems(hostile, out["ok"], out["score"], out["error"])
            problems += harms(outside, marker, 0, out["seen"])
        problems += harms(outside, marker, listener.accepted - before, "")
        return sorted(set(problems))
    finally:
        shutil.rmtree(outside, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--isolate", default="on", help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--program", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args)
        return
    scratch = Path(tempfile.mkdtemp(prefix="evoforge-hostile-bench-"))
    task = scratch / "task"
    task.mkdir()
    (task / "evaluator.py").write_text(EVALUATOR)
    (task / "initial_program.py").write_text(
        "# EVOLVE-BLOCK-START\ndef run():\n    return {}\n# EVOLVE-BLOCK-END\n")
    listener = _Listener()
    settings = ("cold", "warm", "off")
    contained = dict.fromkeys(settings, 0)
    print("| program | isolation on, cold | isolation on, warm | isolation off |\n|---|---|---|---|")
    for hostile in CORPUS:
        cells = []
        for isolate in settings:
            problems = _trial(hostile, isolate, task, listener, scratch)
            contained[isolate] += not problems
            cells.append("contained" if not problems else "; ".join(problems)[:120])
        print(f"| {hostile.name} | {' | '.join(cells)} |", flush=True)
    total = len(CORPUS)
    print("| **contained** | " + " | ".join(f"**{contained[s]}/{total}**" for s in settings) + " |")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
