"""A record that cannot be written is counted, named and shown, and the run goes on: its events
stay waiting (in the lag) and are written when the sink recovers, and what a sink never wrote is
named at the end; the node database, the run's source of truth, and a full disk stop the run
through the fatal path instead."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.crash_kills import Series, mlflow_audit
from evoforge.flows.cli import main
from evoforge.flows.commands import status_text
from evoforge.infra.disk_full import DiskFull
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.sinks.base import Event, EventKind, Sink
from evoforge.stages.sinks.hub import SinkHub
from evoforge.stages.sinks.mlflow_sink import MlflowRecords
from tests.helpers import cli_env, read_nodes, read_status

BROKEN_PLUGIN = '''
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.sinks.base import Sink


class Unwritable(Sink):
    name = "unwritable"

    def record(self, events):
        raise OSError("disk quota exceeded")


class Watch(Stage):
    name, after = "watch", "engineer"

    async def run(self, item, ctx):
        return StageResult(item.node.copy())

    def sinks(self, ctx):
        return [Unwritable()]
'''


class _Failing(Sink):
    def __init__(self, name: str, critical_after: int | None, fail_times: int | None = None,
                 error: BaseException | None = None) -> None:
        self.name = name  # type: ignore[misc]
        self.critical_after = critical_after  # type: ignore[misc]
        self.interval_s = 0.0  # type: ignore[misc]
        self.calls = 0
        self.fail_times = fail_times  # None: always
        self.error = error
        self.written: list[Event] = []

    def record(self, events: Sequence[Event]) -> None:
        self.calls += 1
        if self.fail_times is None or self.calls <= self.fail_times:
            raise self.error or OSError(f"{self.name} is read-only")
        self.written.extend(events)


def test_a_critical_sink_goes_to_the_fatal_path_after_its_limit_of_tries_in_a_row_and_others_never_do():
    fatal: list[str] = []
    called = threading.Event()
    critical, other = _Failing("nodes", critical_after=3), _Failing("mlflow", critical_after=None)

    def on_fatal(where: str, exc: BaseException) -> None:
        fatal.append(f"{where}: {exc} (after {critical.calls} tries)")
        called.set()

    hub = SinkHub([critical, other], on_fatal=on_fatal)
    hub.start()
    hub.emit(Event(EventKind.FINISHED))  # one event, tried again and again after a backoff
    assert called.wait(10)
    assert fatal[0] == "sink nodes (3 batches failed in a row): nodes is read-only (after 3 tries)"
    while other.calls < 4 and not threading.Event().wait(0.05):
        pass
    hub.close()
    assert all("mlflow" not in f for f in fatal)  # counted, never fatal
    failures = hub.failures()
    assert failures["mlflow"] == {"failures": other.calls, "last_error": "OSError: mlflow is read-only",
                                  "never_recorded": 1}  # the event it never wrote, named at the close
    assert failures["nodes"]["failures"] == critical.calls and failures["nodes"]["never_recorded"] == 1


def test_a_failed_batch_stays_in_the_lag_until_the_sink_recovers_then_is_written_once():
    sink = _Failing("mlflow", critical_after=None, fail_times=2)
    hub = SinkHub([sink])
    hub.start()
    events = [Event(EventKind.FINISHED, evaluations=i) for i in range(3)]
    for event in events:
        hub.emit(event)
    assert hub.sync(timeout=10)  # returns once a try after the call failed: it does not wait for a recovery
    health = hub.health()["mlflow"]
    assert sink.calls >= 1 and sink.written == []
    assert (health.recorded, health.pending) == (0, 3)  # not counted as recorded: still waiting
    threading.Event().wait(0.02)
    assert hub.lag_s() >= 0.02  # the oldest failed event is still waiting
    hub.emit(Event(EventKind.FINISHED, evaluations=3))
    deadline = threading.Event()
    while sink.calls < 3 and not deadline.wait(0.05):  # the retries, after their backoff
        pass
    assert hub.sync(timeout=10)
    assert [e.evaluations for e in sink.written] == [0, 1, 2, 3]  # in order, each once
    health = hub.health()["mlflow"]
    assert (health.recorded, health.pending, health.never_recorded) == (4, 0, 0)
    assert hub.lag_s() == 0.0
    assert hub.failures() == {"mlflow": {"failures": 2, "last_error": "OSError: mlflow is read-only",
                                         "never_recorded": 0}}
    hub.close()


def test_a_sink_still_failing_at_the_close_names_what_it_never_recorded():
    sink = _Failing("mlflow", critical_after=None)
    hub = SinkHub([sink])
    hub.start()
    for i in range(5):
        hub.emit(Event(EventKind.FINISHED, evaluations=i))
    hub.close()
    assert hub.never_recorded() == {"mlflow": 5}
    assert hub.failures()["mlflow"]["never_recorded"] == 5
    assert hub.health()["mlflow"].pending == 0  # given up, no longer waiting
    assert hub.lag_s() == 0.0


def test_a_failing_sink_holds_at_most_max_pending_events_and_counts_what_it_dropped():
    sink = _Failing("mlflow", critical_after=None)
    sink.max_pending = 10  # type: ignore[misc]
    hub = SinkHub([sink])
    hub.start()
    for i in range(25):
        hub.emit(Event(EventKind.FINISHED, evaluations=i))
    assert hub.health()["mlflow"].pending <= 10
    assert hub.never_recorded()["mlflow"] >= 15
    hub.close()
    assert hub.never_recorded() == {"mlflow": 25}


def test_a_full_disk_in_any_sink_goes_to_the_fatal_path_at_once_as_disk_full():
    got: list[BaseException] = []
    called = threading.Event()

    def on_fatal(where: str, exc: BaseException) -> None:
        got.append(exc)
        called.set()

    full = OSError(errno.ENOSPC, "No space left on device", "/runs/r/status.json")
    sink = _Failing("files", critical_after=None, error=full)  # not a critical sink
    hub = SinkHub([sink], on_fatal=on_fatal)
    hub.start()
    hub.emit(Event(EventKind.FINISHED))
    assert called.wait(10)
    assert sink.calls == 1 and isinstance(got[0], DiskFull) and got[0].path == "/runs/r/status.json"
    hub.close()
    assert sink.calls == 2  # one last try at the close, no more: another cannot help
    assert hub.never_recorded() == {"files": 1}


class _Tracker:
    """What the MLflow sink calls, in memory; `log_text_on_parent` fails `fail_texts` times."""

    uri = "http://tracking.invalid"

    def __init__(self, fail_texts: int) -> None:
        self.fail_texts = fail_texts
        self.runs: list[str] = []
        self.texts: list[str] = []

    def log_runs(self, runs) -> None:
        self.runs += [run.name for run, _, _ in runs]

    def log_text_on_parent(self, text: str, name: str) -> None:
        if self.fail_texts:
            self.fail_texts -= 1
            raise OSError("database is locked")
        self.texts.append(name)

    def log_parent_traces(self, calls, tags) -> None:
        return None


def test_the_mlflow_sink_given_a_failed_batch_again_writes_each_candidate_run_once(tmp_path):
    tracker = _Tracker(fail_texts=1)
    sink = MlflowRecords(tracker, "full", RunPaths(tmp_path))  # type: ignore[arg-type]
    plan = SimpleNamespace(version=1)
    batch = [Event(EventKind.FINISHED, node=Node(id="a1", run_id="r", code="x = 1", status=EVALUATED)),
             Event(EventKind.PLAN, payload=(plan, "# plan", ()))]
    with pytest.raises(OSError):
        sink.record(batch)  # the candidate's run is written, then the plan fails
    later = Node(id="b2", run_id="r", code="x = 2", status=EVALUATED)
    sink.record(batch + [Event(EventKind.FINISHED, node=later)])
    assert tracker.runs == ["node-a1", "node-b2"]
    assert tracker.texts == ["research_plan.md", "plans/research_plan_v1.md"]


def test_the_mlflow_sink_refuses_to_write_into_a_removed_store_file(tmp_path):
    store = tmp_path / "mlflow.db"
    store.write_bytes(b"")
    tracker = _Tracker(fail_texts=0)
    tracker.uri = f"sqlite:///{store}"  # type: ignore[misc]
    sink = MlflowRecords(tracker, "full", RunPaths(tmp_path))  # type: ignore[arg-type]
    store.unlink()
    with pytest.raises(FileNotFoundError, match="was removed during the run"):
        sink.record([Event(EventKind.FINISHED, node=Node(id="a1", run_id="r", code="x", status=EVALUATED))])
    assert tracker.runs == []  # (sqlite would have written to the unlinked file: lost, unseen)


@pytest.mark.slow
def test_a_sink_that_cannot_write_is_named_in_status_and_on_the_last_line_and_the_run_finishes(
        tmp_path, capsys):
    plugin = tmp_path / "broken_sink.py"
    plugin.write_text(BROKEN_PLUGIN)
    run_dir = tmp_path / "run"
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--plugin", str(plugin), "--max-evals", "6", "--no-mlflow", "--quiet"])
    assert code == 0  # the budget was spent: records that failed do not change the exit code
    status = read_status(run_dir)
    assert status["evaluations"] == 6 and status["state"] == "finished"
    failure = status["tracking_failures"]["unwritable"]
    assert failure["failures"] >= 1 and failure["last_error"] == "OSError: disk quota exceeded"
    assert list(status["tracking_failures"]) == ["unwritable"]  # evoforge's own sinks all wrote
    assert len([n for n in read_nodes(run_dir) if n.was_evaluated]) == 6
    err = capsys.readouterr().err
    assert "[evoforge] some records were not written: unwritable: " in err
    assert "(last: OSError: disk quota exceeded)" in err
    assert "not recorded  unwritable: " in status_text(status)
    assert "OSError: disk quota exceeded" in (run_dir / "run.log").read_text()  # with its traceback


_LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
db.execute("BEGIN EXCLUSIVE")  # no other connection may read or write until COMMIT
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


def _start_run(tmp_path: Path, budget: int) -> tuple[subprocess.Popen, Path, Path, list[str]]:
    config = tmp_path / "fast-status.json"
    config.write_text(json.dumps({"engine": {"progress_interval_s": 0.25}}))
    run_dir, workspace = tmp_path / "run", tmp_path / "ws"
    args = ["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(workspace),
            "--max-evals", str(budget), "--seed", "5", "--config", str(config), "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "evoforge.flows.cli", *args], cwd=tmp_path,
                            env=cli_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, run_dir, workspace, args


def _status_when(run_dir: Path, proc: subprocess.Popen, check, what: str, timeout: float = 120) -> dict:
    """status.json once `check(status)` holds (the run still going)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        try:
            status = read_status(run_dir)
            if check(status):
                return status
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"not seen in {timeout} s: {what}")


def _candidates_in_mlflow(run_dir: Path, workspace: Path, tmp_path: Path) -> tuple[list, list, list]:
    series = Series(run_dir, workspace, tmp_path / "prefect-home", 0)
    return mlflow_audit(series, read_nodes(run_dir))


@pytest.mark.slow
def test_an_mlflow_store_locked_by_another_process_is_counted_then_caught_up_and_the_run_ends_normally(
        tmp_path):
    proc, run_dir, workspace, _ = _start_run(tmp_path, budget=80)
    try:
        _status_when(run_dir, proc, lambda s: s["evaluations"] >= 3, "3 evaluations")
        locker = subprocess.Popen([sys.executable, "-c", _LOCKER, str(workspace / "mlflow.db")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert locker.stdout.readline().strip() == "locked"
        try:
            at_lock = read_status(run_dir)["evaluations"]
            # MLflow waits 20 s for a lock (its sqlite busy_timeout), then the write fails
            locked = _status_when(run_dir, proc, lambda s: "mlflow" in s["tracking_failures"],
                                  "a failed MLflow write")
            assert locked["evaluations"] > at_lock  # the run went on while its store was locked
            assert locked["sinks"]["mlflow"]["pending"] > 0 and locked["records_lag_s"] > 0  # waiting
        finally:
            locker.communicate("release\n", timeout=30)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    status = read_status(run_dir)
    assert status["evaluations"] == 80 and status["state"] == "finished"
    failure = status["tracking_failures"]["mlflow"]
    assert failure["failures"] >= 1 and "database is locked" in failure["last_error"]
    assert failure["never_recorded"] == 0  # caught up after the lock went
    assert status["sinks"]["mlflow"]["pending"] == 0 and status["records_lag_s"] == 0
    assert _candidates_in_mlflow(run_dir, workspace, tmp_path) == ([], [], [])  # each candidate once
    assert "[evoforge] some writes failed: mlflow: " in err and ", 0 events never recorded" in err


@pytest.mark.slow
def test_an_mlflow_store_removed_mid_run_is_counted_and_named_at_the_end_and_the_run_ends_normally(
        tmp_path):
    proc, run_dir, workspace, _ = _start_run(tmp_path, budget=20)
    try:
        _status_when(run_dir, proc, lambda s: s["evaluations"] >= 3, "3 evaluations")
        (workspace / "mlflow.db").unlink()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    status = read_status(run_dir)
    assert status["evaluations"] == 20 and status["state"] == "finished"
    failure = status["tracking_failures"]["mlflow"]
    assert "was removed during the run" in failure["last_error"]
    assert failure["never_recorded"] > 0
    assert status["sinks"]["mlflow"]["never_recorded"] == failure["never_recorded"]
    assert status["sinks"]["mlflow"]["pending"] == 0
    assert f"mlflow: {failure['failures']} failed, {failure['never_recorded']} events never recorded" in err
    assert "[evoforge] some records were not written: " in err
    assert f"{failure['never_recorded']} events never recorded" in status_text(status)
