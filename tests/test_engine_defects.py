"""Regression tests for the engine's former defects, each named after the behaviour it pins:
adaptive control really decides, a stop is as prompt as the docs say while an LLM call hangs, a
writer failure exits 1 with the traceback, snapshots and pruning cope with a speculative best, and
the run is prepared (task, backend, LLM check) once."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evoforge.evaluators.cases import CaseResult
from evoforge.flows.cli import main
from evoforge.flows.run_state import RunState
from evoforge.flows.snapshot import build_snapshot
from evoforge.infra.config import SearchConfig
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED, SPECULATIVE, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths
from evoforge.infra.timeline import read_timeline
from evoforge.stages.population.history import PoolHistory
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.speculation import Reference, Speculation
from evoforge.stages.population.stats import RunStats
from evoforge.stages.reports.leaderboard import leaderboard_md
from evoforge.stages.reports.run_report import NOT_DRAWN, RunFacts, write_report
from evoforge.stages.rounds.records import Rounds
from evoforge.stages.sample import make_sampler
from evoforge.stages.sinks.base import Event, EventKind
from evoforge.stages.sinks.hub import SinkHub
from evoforge.stages.sinks.run_files import RunFiles
from tests.helpers import cli_env, read_status

CASES = [str(i) for i in range(8)]
REPO = Path(__file__).resolve().parent.parent


def _pool_with_speculative_best() -> tuple[Pool, Node, Node]:
    pool = Pool()
    best = Node(id="best", run_id="r", code="b", status=EVALUATED, score_full=0.5,
                case_scores={c: 0.5 for c in CASES})
    pool.add(best)
    # released mid-evaluation: its case scores are not known yet (it has no full score either)
    spec = Node(id="spec", run_id="r", code="s", status=SPECULATIVE, score_partial=0.9,
                speculative_at=1.0)
    pool.add(spec)
    assert pool.best is spec
    return pool, best, spec


def test_a_losing_prefix_is_pruned_even_while_the_best_is_speculative():
    pool, best, _ = _pool_with_speculative_best()
    reference = Reference.of(pool)
    assert reference is not None and reference.node_id == "best"  # never the speculative node
    released = []
    spec = Speculation(0.25, len(CASES), True, reference, lambda p, s: released.append(p))
    answers = [spec.on_case(CaseResult(CASES[i], i, 0.4, {}, None)) for i in range(3)]
    assert answers == [True, False, True] and spec.pruned and not released


def test_with_no_reference_nothing_is_released_or_pruned():
    spec = Speculation(0.25, len(CASES), True, None, lambda p, s: pytest.fail("released"))
    assert all(spec.on_case(CaseResult(CASES[i], i, 0.4, {}, None)) for i in range(8))
    assert not spec.pruned and spec.partial == pytest.approx(0.4)


def test_snapshots_show_a_speculative_node_without_crashing(tmp_path):
    pool, best, spec = _pool_with_speculative_best()
    state = RunState(pool, make_sampler(SearchConfig()), PoolHistory(), RunStats(), Rounds())
    hub = SinkHub([RunFiles(RunPaths(tmp_path))])
    hub.start()
    snapshot = build_snapshot(state, hub, "t", {"state": "running"}, {}, {})
    hub.emit(Event(EventKind.SNAPSHOT, payload=snapshot))
    hub.close()
    status = snapshot["status"]
    assert status["best_score"] == 0.5 and status["best_node"] == "best"  # fully evaluated only
    assert status["speculative_best"] == "spec"
    board = leaderboard_md("t", pool)
    assert "| 1 | `spec` | 0.9 (speculative, prefix) |" in board and "| 2 | `best` | 0.5 |" in board
    assert json.loads((tmp_path / "status.json").read_text())["speculative_best"] == "spec"


@pytest.mark.slow
def test_adaptive_control_makes_logged_decisions_when_a_stage_is_slow(tmp_path):
    config = tmp_path / "c.yaml"
    adaptive = {"enabled": True, "tau_s": 0.5, "max_workers": {"research": 6}}
    # a timeline line every 0.2 s: finer than tau, so it shows the research pool before and after a
    # step; no prefetch, so that the research pool is the LLM's slots (they move together)
    config.write_text(json.dumps({"adaptive": adaptive, "engine": {"progress_interval_s": 0.2},
                                  "scheduler": {"prefetch": 0}}))
    run_dir = tmp_path / "run"
    with SimulatorProcess(SimConfig(median_s=0.6, sigma=0.2, slots=8, seed=3)) as sim:
        code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", "30",
                     "--workers", "research=1,engineer=2", "--no-mlflow", "--quiet"])
    assert code == 0
    status = read_status(run_dir)
    log = (run_dir / "run.log").read_text()
    assert "adaptive: +1 research (1->2)" in log
    assert status["adaptive_decisions"] == log.count("evoforge.adaptive: adaptive: ") >= 1
    # the effect: the research pool really grew. Lines with no research worker are from before the
    # engine started or after it stopped.
    research = [w for row in read_timeline(run_dir / "timeline.jsonl")
                if (w := row["stages"].get("research", {}).get("workers", 0)) >= 1]
    assert research[0] == 1, research  # as configured, until the first step
    assert next((w for w in research if w != 1), None) == 2 and max(research) <= 6, research


def documented_exit_bound_s() -> float:
    """The seconds docs/guide/watching.md promises between Ctrl+C and the end of the process."""
    text = " ".join((REPO / "docs" / "guide" / "watching.md").read_text().split())
    found = re.search(r"Ctrl\+C stops cleanly within ([0-9.]+) s", text)
    assert found, "docs/guide/watching.md no longer states how soon Ctrl+C ends the run"
    return float(found.group(1))


def _status_value(run_dir: Path, key: str) -> int:
    try:
        return read_status(run_dir).get(key, 0)
    except (OSError, ValueError):  # not written yet, or caught mid-replace
        return 0


@pytest.mark.slow
def test_ctrl_c_stops_at_once_and_exits_within_the_documented_bound_while_every_llm_call_hangs(tmp_path):
    bound = documented_exit_bound_s()
    run_dir = tmp_path / "run"
    err = tmp_path / "stderr.txt"  # a file, not a pipe: nothing blocks on it, nor waits for its end
    with SimulatorProcess(SimConfig(median_s=0.01, slots=8, seed=1, error_rate=1.0,
                                    error_kinds=("hang",), hang_s=120)) as sim, err.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evoforge.flows.cli", "run", "circle_packing", "--run-dir", str(run_dir),
             "--workspace", str(tmp_path / "ws"), "--llm-base-url", sim.base_url, "--no-mlflow",
             "--max-evals", "20"], cwd=tmp_path, env=cli_env(tmp_path), stdout=subprocess.DEVNULL,
            stderr=sink)
        deadline = time.monotonic() + 120
        while _status_value(run_dir, "research_busy") < 1:
            if proc.poll() is not None:
                pytest.fail(f"the run ended (code {proc.returncode}) before a research call was in flight: "
                            f"{_text(err)}")
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                pytest.fail(f"status.json never showed research_busy >= 1 within 120 s: {_text(err)}")
            time.sleep(0.2)
        time.sleep(0.5)  # the calls are hanging now
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        while "interrupted" not in _text(run_dir / "run.log") and time.monotonic() - signalled < 30:
            time.sleep(0.02)
        engine_stop_s = time.monotonic() - signalled
        while proc.poll() is None and time.monotonic() - signalled < 60:
            time.sleep(0.005)
        exit_s = time.monotonic() - signalled  # the shell's prompt would be back now
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, _text(err)
    assert engine_stop_s < 1.0, engine_stop_s  # the engine stops at once...
    # ...and the process is gone (records written, closed) within the bound the docs state, measured
    # under load by bench/ctrl_c.py
    assert exit_s <= bound, (exit_s, bound)
    assert read_status(run_dir)["state"] == "interrupted"
    assert NOT_DRAWN in (run_dir / "report.md").read_text()  # the plots are left to `evoforge report`


def test_an_interrupted_runs_report_has_no_plots_and_says_how_to_draw_them(tmp_path):
    nodes = [Node(id="seed", run_id="r", code="x = 1\n", status=EVALUATED, score_full=0.5, origin="seed",
                  created_at=1.0, evaluated_at=2.0)]
    paths = RunPaths(tmp_path)
    text, drawn = write_report(paths, nodes, [], RunFacts("t", True), "seed", draw=False)
    assert drawn == [] and NOT_DRAWN in text and not paths.figures.exists()  # Ctrl+C does not wait for them
    text, drawn = write_report(paths, nodes, [], RunFacts("t", True), "seed")
    assert len(drawn) == 5 and all(f.path.is_file() for f in drawn) and NOT_DRAWN not in text


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.slow
def test_a_writer_failure_exits_1_with_the_traceback_in_run_log(tmp_path, monkeypatch):
    real_write = NodeStore.write
    calls = {"n": 0}

    def failing_write(self, nodes, meta):
        calls["n"] += 1
        if calls["n"] > 4:
            raise OSError(5, "Input/output error")
        return real_write(self, nodes, meta)

    monkeypatch.setattr(NodeStore, "write", failing_write)
    run_dir = tmp_path / "run"
    started = time.monotonic()
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--max-evals", "60", "--no-mlflow", "--quiet"])
    assert code == 1 and time.monotonic() - started < 60
    log = (run_dir / "run.log").read_text()
    assert "fatal error in sink nodes (3 batches failed in a row)" in log
    assert "Traceback" in log and "Input/output error" in log


@pytest.mark.slow
def test_the_run_is_prepared_and_the_llm_checked_once(tmp_path, monkeypatch):
    from evoforge.flows import prepare as prepare_module
    from evoforge.infra.llm.openai_backend import OpenAIBackend

    counts = {"task": 0, "check": 0}
    real_load, real_check = prepare_module.load_task, OpenAIBackend.check

    def counting_load(spec, *args, **kwargs):
        counts["task"] += 1
        return real_load(spec, *args, **kwargs)

    async def counting_check(self):
        counts["check"] += 1
        return await real_check(self)

    monkeypatch.setattr(prepare_module, "load_task", counting_load)
    monkeypatch.setattr(OpenAIBackend, "check", counting_check)
    with SimulatorProcess(SimConfig(median_s=0.02, slots=4, seed=1)) as sim:
        code = main(["run", "circle_packing", "--run-dir", str(tmp_path / "run"), "--workspace",
                     str(tmp_path / "ws"), "--llm-base-url", sim.base_url, "--max-evals", "4",
                     "--no-mlflow", "--quiet"])
    assert code == 0 and counts == {"task": 1, "check": 1}


@pytest.mark.slow
def test_a_stop_kills_evaluations_running_on_the_task_runner(tmp_path):
    import os
    import threading

    from tests.helpers import processes_mentioning

    task = tmp_path / "sleepy"
    task.mkdir()
    (task / "initial_program.py").write_text("# EVOLVE-BLOCK-START\nX = 1.0\n# EVOLVE-BLOCK-END\n")
    (task / "evaluator.py").write_text(
        "import importlib.util, time\n"
        "def evaluate(path):\n"
        "    spec = importlib.util.spec_from_file_location('p', path)\n"
        "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "    if m.X != 1.0:\n"
        "        time.sleep(120)\n"
        "    return {'combined_score': m.X}\n")
    run_dir = tmp_path / "run"
    signalled: dict[str, float] = {}

    def interrupt_when_evaluating() -> None:
        deadline = time.monotonic() + 60
        while _status_value(run_dir, "engineer_busy") < 2:
            if time.monotonic() > deadline:  # stop the run all the same, and fail the test below
                signalled["missed"] = 1.0
                break
            time.sleep(0.1)
        time.sleep(0.5)
        signalled["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_when_evaluating, daemon=True)
    watcher.start()
    code = main(["run", str(task), "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--max-evals", "10", "--no-mlflow", "--quiet"])
    returned = time.monotonic() - signalled["at"]
    if "missed" in signalled:
        pytest.fail("status.json never showed engineer_busy >= 2 (two evaluations running) within 60 s")
    assert code == 130 and returned < 5, returned
    assert processes_mentioning(str(tmp_path / "run" / ".scratch")) == []  # the sandboxes are gone
