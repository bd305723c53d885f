"""An evaluation's recorded time is its own: from its start to its child's exit as the fork server
saw it, without the time it waited for a busy event loop, which is reported beside it (wait_s)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from evoforge.evaluators.eval_clock import EvalClock, current, granted, timing
from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.evaluators.io_threads import off_loop
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task, load_task
from evoforge.stages.evaluation.job import EvalReport, EvalRequest, EvaluationRunner, Release
from evoforge.stages.evaluation.slots import SlottedEvaluations

SLEEP_S = 0.2  # the evaluator's own time
BLOCK_S = 0.5  # the event loop is blocked this long, from just before the child ends
EVALUATOR = """
import time
from pathlib import Path

def evaluate(program_path):
    Path({mark!r}).write_text("sleeping")
    time.sleep({sleep})
    return {{"combined_score": 1.0}}
"""
PROGRAM = "# EVOLVE-BLOCK-START\nX = 1\n# EVOLVE-BLOCK-END\n"
# not isolated: the child writes its mark where the test sees it (isolation is tests/test_sandbox.py's)
LIMITS = SandboxLimits(timeout_s=30.0, memory_mb=768, max_procs=32, isolate=False)


@pytest.fixture
def sleeper(tmp_path: Path) -> tuple[Task, Path]:
    root, mark = tmp_path / "task", tmp_path / "sleeping"
    root.mkdir()
    (root / "evaluator.py").write_text(EVALUATOR.format(mark=str(mark), sleep=SLEEP_S))
    (root / "initial_program.py").write_text(PROGRAM)
    return load_task(root), mark


async def _blocked_at_the_end(task: Task, mark: Path) -> tuple[EvalOutcome, float]:
    """Evaluate, blocking the loop for BLOCK_S once the child has begun its sleep; and the wall time."""
    await evaluate_program(task, task.initial_code, limits=LIMITS)  # boots the fork server
    mark.unlink()  # noqa: ASYNC240 - the loop's own blocking is the point of this test
    started = time.monotonic()
    job = asyncio.ensure_future(evaluate_program(task, task.initial_code, limits=LIMITS))
    while not mark.exists() and not job.done():  # noqa: ASYNC110, ASYNC240 - the child's mark
        await asyncio.sleep(0.002)
    time.sleep(BLOCK_S)  # noqa: ASYNC251 - a busy event loop: the child ends meanwhile, nobody sees it
    outcome = await job
    return outcome, time.monotonic() - started


def test_a_blocked_loop_is_not_the_evaluations_time(sleeper: tuple[Task, Path]) -> None:
    outcome, wall = asyncio.run(_blocked_at_the_end(*sleeper))
    assert outcome.ok, outcome.error
    assert wall >= BLOCK_S  # the loop saw the result only after its block
    assert SLEEP_S <= outcome.seconds < SLEEP_S + 0.25  # not >= BLOCK_S, as before the clock
    assert outcome.wait_s >= 0.15  # the loop's delay in seeing the exit (~BLOCK_S - SLEEP_S), reported
    assert outcome.seconds + outcome.wait_s == pytest.approx(outcome.stamps["seen"] - outcome.stamps["start"])
    assert outcome.stamps["seen"] - outcome.stamps["exited"] >= 0.15  # the end is the server's stamp


def test_the_loop_wait_before_the_child_starts_is_counted_apart() -> None:
    async def scenario() -> EvalClock:
        with timing() as clock:
            hop = asyncio.ensure_future(off_loop(time.sleep, 0.01))
            await asyncio.sleep(0)  # the thread runs...
            time.sleep(0.3)  # noqa: ASYNC251 - ...and its result waits for the loop, blocked here
            await hop
            clock.launched = time.monotonic()
            await off_loop(time.sleep, 0.01)  # after the launch: beside the child, not counted
            time.sleep(0.05)  # noqa: ASYNC251 - a blocked loop after the launch: not counted
        return clock

    clock = asyncio.run(scenario())
    assert 0.25 <= clock.loop_wait < 0.3
    assert current() is None


def test_split_keeps_the_wait_apart_and_sums_to_the_wall() -> None:
    clock = EvalClock(start=100.0, loop_wait=0.03)
    own, wait = clock.split(exited_at=100.25, seen_at=100.75)
    assert own == pytest.approx(0.22)
    assert wait == pytest.approx(0.53)
    assert clock.split(exited_at=None, seen_at=100.5) == pytest.approx((0.47, 0.03))  # cold: the loop's view
    assert clock.split(exited_at=101.0, seen_at=100.5) == pytest.approx((0.47, 0.03))  # never past the loop


class _Fixed(EvaluationRunner):
    """Reports a fixed wait, and the slot grant its clock saw."""

    def __init__(self) -> None:
        self.granted: list[float] = []

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        with timing() as clock:
            self.granted.append(clock.marks["granted"])
        at = clock.marks["granted"]
        outcome = EvalOutcome(True, 1.0, {}, {}, None, 0.1, None, wait_s=0.04,
                              stamps={"granted": at, "start": at + 0.5})
        quick = EvalOutcome(True, None, {}, {}, None, 0.01, None, wait_s=0.01,
                            stamps={"granted": at, "start": at + 0.02})  # ran first
        return EvalReport(outcome, quick_test=quick)


def test_slots_total_the_waits_for_status(tmp_path: Path) -> None:
    inner = _Fixed()
    slots = SlottedEvaluations(inner, 1)
    task = load_task("circle_packing")
    request = EvalRequest("n1", task.initial_code, task, LIMITS, tmp_path)

    async def two() -> None:
        before = time.monotonic()
        await asyncio.gather(slots.run(request, None), slots.run(request, None))
        assert all(g >= before for g in inner.granted)

    asyncio.run(two())
    figures = slots.timing()
    assert figures["evaluations_timed"] == 2
    assert figures["eval_loop_wait_s"] == pytest.approx(0.1)
    assert figures["eval_wrapper_s"] == pytest.approx(0.04)  # grant to the first (quick) start, twice
    assert figures["eval_slot_wait_s"] >= 0.0
    with granted(), timing() as clock:
        assert "granted" in clock.marks
