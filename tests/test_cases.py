"""Case-based evaluation streams per-case results, stops on request, and fails on a bad case."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evoforge.evaluators import cases as cases_module
from evoforge.evaluators.cases import CaseOutcome, CaseResult, evaluate_cases, list_cases
from evoforge.evaluators.evaluation import evaluate_program
from evoforge.evaluators.sandbox import SandboxLimits, run_sandboxed
from evoforge.evaluators.task import Task, TaskError, load_task
from tests.helpers import processes_mentioning

EVALUATOR = '''
import importlib.util

_MODULES = {}


def _program(path):
    if path not in _MODULES:  # import the candidate once per evaluation, not once per case
        spec = importlib.util.spec_from_file_location("candidate", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _MODULES[path] = module
    return _MODULES[path]


def cases():
    return CASE_IDS


def evaluate_case(program_path, case):
    return _program(program_path).run(case)


def evaluate(program_path):
    scores = [evaluate_case(program_path, c)["combined_score"] for c in cases()]
    return {"combined_score": sum(scores) / len(scores)}
'''

BODY = 'return {"combined_score": KNOB * case + 1.0, "half": case / 2, "label": "x"}'


def program(body: str = BODY) -> str:
    """A candidate whose run(case) executes ``body``; KNOB sits outside the block."""
    block = "def run(case):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return f"import os, sys, time\nKNOB = 0.5\n# EVOLVE-BLOCK-START\n{block}\n# EVOLVE-BLOCK-END\n"


def make_task(root: Path, case_ids: str = "list(range(10))", yaml: str | None = None) -> Task:
    root.mkdir(parents=True)
    (root / "evaluator.py").write_text(EVALUATOR.replace("CASE_IDS", case_ids))
    (root / "initial_program.py").write_text(program())
    if yaml is not None:
        (root / "task.yaml").write_text(yaml)
    return load_task(root)


@pytest.fixture
def task(tmp_path: Path) -> Task:
    return make_task(tmp_path / "task")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    path = tmp_path / "scratch"
    path.mkdir()
    return path


def run(task: Task, code: str, order: list[str], scratch: Path, on_case=None, **limits: float
        ) -> CaseOutcome:
    lim = SandboxLimits(**{"timeout_s": 10.0, **limits})
    return asyncio.run(
        evaluate_cases(task, code, order, on_case=on_case, limits=lim, scratch_root=scratch)
    )


ALL = [str(c) for c in range(10)]


def test_all_cases_run_in_order_with_the_mean_score(task: Task, scratch: Path) -> None:
    seen: list[CaseResult] = []
    outcome = run(task, program(), ALL, scratch, on_case=lambda r: seen.append(r) is None)
    assert outcome.ok, outcome.error
    assert [r.case for r in seen] == ALL and [r.index for r in seen] == list(range(10))
    assert seen[3] == CaseResult("3", 3, 2.5, {"combined_score": 2.5, "half": 1.5}, None)
    assert list(outcome.case_scores) == ALL
    assert outcome.score == pytest.approx(0.5 * 4.5 + 1.0)
    assert outcome.metrics == pytest.approx({"combined_score": 3.25, "half": 2.25})
    assert (outcome.cases_done, outcome.cases_total, outcome.stopped_early) == (10, 10, False)
    assert list(scratch.iterdir()) == []


def test_a_custom_order_is_respected(task: Task, scratch: Path) -> None:
    calls: list[tuple[str, int]] = []
    order = ["7", "2", "9", "0"]
    outcome = run(task, program(), order, scratch, on_case=lambda r: calls.append((r.case, r.index)) is None)
    assert outcome.ok, outcome.error
    assert calls == [("7", 0), ("2", 1), ("9", 2), ("0", 3)]
    assert list(outcome.case_scores) == order
    assert outcome.score == pytest.approx(0.5 * (7 + 2 + 9 + 0) / 4 + 1.0)
    assert outcome.cases_total == 4


def test_stopping_after_three_cases_kills_the_run_at_once(task: Task, scratch: Path) -> None:
    slow = program("time.sleep(0.5)\n" + BODY)
    start = time.monotonic()
    outcome = run(task, slow, ALL, scratch, on_case=lambda r: r.index < 2)
    elapsed = time.monotonic() - start
    assert processes_mentioning(str(scratch)) == []
    assert outcome.ok and outcome.error is None
    assert outcome.stopped_early and outcome.cases_done == 3
    assert outcome.score == pytest.approx(0.5 * 1.0 + 1.0)
    assert elapsed < 3.0  # 3 cases take 1.5 s; all 10 would take 5 s
    assert list(scratch.iterdir()) == []


def test_the_score_does_not_depend_on_the_order_the_cases_ran_in(tmp_path: Path, scratch: Path) -> None:
    task = make_task(tmp_path / "three", case_ids="[0, 1, 2]")
    code = program('return {"combined_score": [0.1, 0.2, 0.3][case]}')
    forward, backward = (run(task, code, order, scratch) for order in (["0", "1", "2"], ["2", "1", "0"]))
    assert (0.1 + 0.2 + 0.3) / 3 != (0.3 + 0.2 + 0.1) / 3  # a plain sum rounds differently
    assert forward.ok and backward.ok and forward.score == backward.score


def test_a_stop_on_the_last_case_is_a_complete_evaluation(task: Task, scratch: Path) -> None:
    outcome = run(task, program(), ["1", "2"], scratch, on_case=lambda r: False)
    assert outcome.ok and outcome.cases_done == 1 and outcome.stopped_early
    outcome = run(task, program(), ["1"], scratch, on_case=lambda r: False)
    assert outcome.ok and outcome.cases_done == 1 and not outcome.stopped_early


def test_a_raising_case_fails_the_candidate_and_names_the_case(task: Task, scratch: Path) -> None:
    seen: list[CaseResult] = []
    body = "if case == 5:\n    raise ValueError('bad case five')\n" + BODY
    outcome = run(task, program(body), ALL, scratch, on_case=lambda r: seen.append(r) is None)
    assert not outcome.ok and outcome.score is None
    assert outcome.error.startswith("case 5 failed: evaluator raised ValueError: bad case five")
    assert outcome.cases_done == 5 and len(outcome.case_scores) == 5
    assert seen[-1].case == "5" and seen[-1].score is None and "bad case five" in seen[-1].error
    assert outcome.artifacts["failure_case"] == "5"
    assert "ValueError" in outcome.artifacts["traceback"]


def test_a_case_without_the_objective_fails(task: Task, scratch: Path) -> None:
    body = "if case == 2:\n    return {'accuracy': 1.0}\n" + BODY
    outcome = run(task, program(body), ALL, scratch)
    assert not outcome.ok and outcome.cases_done == 2
    assert outcome.error.startswith("case 2 failed: metric 'combined_score' missing")


def test_a_segfault_mid_way_keeps_the_cases_done(task: Task, scratch: Path) -> None:
    body = "if case == 4:\n    import ctypes\n    ctypes.string_at(0)\n" + BODY
    outcome = run(task, program(body), ALL, scratch)
    assert not outcome.ok
    assert "SIGSEGV" in outcome.error and "(4/10 cases done)" in outcome.error
    assert outcome.cases_done == 4 and list(outcome.case_scores) == ["0", "1", "2", "3"]


@pytest.mark.parametrize(
    ("exit_call", "expected"),
    [
        ("sys.exit(0)", "case 3 failed: program called sys.exit(0)"),
        ("os._exit(0)", "exited with code 0 without writing every case result"),
    ],
)
def test_an_exit_mid_way_fails(task: Task, scratch: Path, exit_call: str, expected: str) -> None:
    outcome = run(task, program(f"if case == 3:\n    {exit_call}\n" + BODY), ALL, scratch)
    assert not outcome.ok and outcome.cases_done == 3
    assert outcome.error.startswith(expected)


def test_a_timeout_mid_way_says_how_many_cases_were_done(task: Task, scratch: Path) -> None:
    outcome = run(task, program("time.sleep(0.3)\n" + BODY), ALL, scratch, timeout_s=1.5)
    assert not outcome.ok
    assert 0 < outcome.cases_done < 10
    assert outcome.error.startswith(f"timed out after 1.5 s ({outcome.cases_done}/10 cases done)")


def test_an_unknown_case_id_fails_before_any_case(task: Task, scratch: Path) -> None:
    outcome = run(task, program(), ["1", "99"], scratch)
    assert not outcome.ok and outcome.cases_done == 0
    assert "'99'" in outcome.error and "cases()" in outcome.error


def test_case_ids_map_back_to_their_original_types(tmp_path: Path, scratch: Path) -> None:
    task = make_task(tmp_path / "mixed", case_ids='[1, "b", "1x"]')
    assert asyncio.run(list_cases(task, scratch_root=scratch)) == ["1", "b", "1x"]
    body = "return {'combined_score': 1.0 if isinstance(case, int) else 3.0}"
    outcome = run(task, program(body), ["b", "1", "1x"], scratch)
    assert outcome.ok, outcome.error
    assert outcome.case_scores == {"b": 3.0, "1": 1.0, "1x": 3.0}


def test_list_cases_runs_once_per_task_and_notices_an_edit(
    task: Task, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = cases_module.run_harness

    async def counting(*args, **kwargs):
        calls.append(args[2])
        return await real(*args, **kwargs)

    monkeypatch.setattr(cases_module, "run_harness", counting)
    first = asyncio.run(list_cases(task, scratch_root=scratch))
    first.append("mutated by the caller")
    assert asyncio.run(list_cases(task, scratch_root=scratch)) == ALL
    assert calls == [["--list-cases"]]
    evaluator = task.evaluator_path
    evaluator.write_text(evaluator.read_text().replace("list(range(10))", "list(range(3))"))
    assert asyncio.run(list_cases(task, scratch_root=scratch)) == ["0", "1", "2"]
    assert len(calls) == 2


def test_a_broken_cases_function_is_a_task_error(tmp_path: Path, scratch: Path) -> None:
    task = make_task(tmp_path / "broken", case_ids="[1.5]")
    with pytest.raises(TaskError, match=r"cannot list the cases: cases\(\) returned a case id 1.5"):
        asyncio.run(list_cases(task, scratch_root=scratch))


def test_case_based_detection(tmp_path: Path, task: Task) -> None:
    assert task.case_based
    assert not load_task("circle_packing").case_based
    off = make_task(tmp_path / "off", yaml="cases: false\n")
    assert not off.case_based
    with pytest.raises(TaskError, match="not case-based"):
        asyncio.run(evaluate_cases(off, program(), ["1"]))
    root = tmp_path / "plain"
    root.mkdir()
    (root / "evaluator.py").write_text("def evaluate(program_path):\n    return {}\n")
    (root / "initial_program.py").write_text(program())
    (root / "task.yaml").write_text("cases: true\n")
    with pytest.raises(TaskError, match="cases is true but evaluator.py lacks"):
        load_task(root)


def test_the_plain_evaluate_still_works_on_a_case_task(task: Task, scratch: Path) -> None:
    outcome = asyncio.run(evaluate_program(task, program(), scratch_root=scratch))
    assert outcome.ok, outcome.error
    assert outcome.score == pytest.approx(3.25)


def test_an_unreadable_result_line_stops_the_stream(tmp_path: Path) -> None:
    code = (
        "import os, time\nfd = int(os.environ['EVOFORGE_RESULT_FD'])\n"
        "os.write(fd, b'{\"case\": \"0\"}\\nnot json\\n')\ntime.sleep(30)\n"
    )
    lines: list[dict] = []
    start = time.monotonic()
    result = asyncio.run(run_sandboxed([sys.executable, "-c", code], tmp_path, SandboxLimits(),
                                       on_line=lambda line: lines.append(line) is None))
    assert time.monotonic() - start < 5
    assert lines == [{"case": "0"}]
    assert result.stopped and result.payload is None
    assert "unreadable result line: 'not json'" in result.stream_error


def test_an_exception_in_on_case_kills_the_run_and_propagates(task: Task, scratch: Path) -> None:
    def explode(result: CaseResult) -> bool:
        raise RuntimeError("engine bug")

    with pytest.raises(RuntimeError, match="engine bug"):
        run(task, program("time.sleep(0.5)\n" + BODY), ALL, scratch, on_case=explode)
    assert processes_mentioning(str(scratch)) == []
