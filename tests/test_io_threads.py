"""An evaluation's file work (copying the task folder, finding its fork server, handing the copy
over, deleting it) runs on the sandbox's own threads: it never queues behind the flow's default
executor, where the cognition base's embeddings and retrievals run. The recorded seconds end when
the result is in, before the copy is deleted."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from pathlib import Path

from evoforge.evaluators import evaluation
from evoforge.evaluators.evaluation import evaluate_program
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task


def test_an_evaluation_finishes_while_every_default_executor_thread_is_busy(tmp_path: Path,
                                                                           monkeypatch) -> None:
    made: list[Path] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(**kwargs: object) -> str:  # the evaluation's private copy, wherever it goes
        path = real_mkdtemp(**kwargs)  # type: ignore[arg-type]
        if kwargs.get("prefix") == "evoforge-eval-":
            made.append(Path(path))
        return path

    monkeypatch.setattr(evaluation.tempfile, "mkdtemp", mkdtemp)
    task = load_task("circle_packing")
    code = (task.root / task.program_name).read_text()
    released = threading.Event()

    async def scenario() -> tuple[bool, float | None]:
        loop = asyncio.get_running_loop()
        size = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor
        blockers = [loop.run_in_executor(None, released.wait, 120) for _ in range(size)]
        try:
            outcome = await asyncio.wait_for(
                evaluate_program(task, code, limits=SandboxLimits(timeout_s=30), scratch_root=tmp_path),
                timeout=60)
            finished_before_release = not released.is_set()
        finally:
            released.set()
            await asyncio.gather(*blockers)
        return finished_before_release and outcome.ok, outcome.seconds

    ok, seconds = asyncio.run(scenario())
    assert len(made) == 1
    assert ok  # with the file work on the default executor this waits for the blockers (timeout)
    assert seconds is not None and 0 < seconds < 60
    assert not made[0].exists()  # the copy is deleted before the call returns
