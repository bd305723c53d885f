"""A record that cannot be written is counted, named and shown, and the run goes on; the node
database, the run's source of truth, stops the run through the fatal path instead."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from evoforge.flows.cli import main
from evoforge.flows.commands import status_text
from evoforge.stages.sinks.base import Event, EventKind, Sink
from evoforge.stages.sinks.hub import SinkHub
from tests.helpers import read_nodes, read_status

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
    def __init__(self, name: str, critical_after: int | None) -> None:
        self.name = name  # type: ignore[misc]
        self.critical_after = critical_after  # type: ignore[misc]
        self.interval_s = 0.0  # type: ignore[misc]
        self.calls = 0

    def record(self, events: Sequence[Event]) -> None:
        self.calls += 1
        raise OSError(f"{self.name} is read-only")


def _batches(hub: SinkHub, n: int) -> None:
    for _ in range(n):  # one event and a sync each: one batch each
        hub.emit(Event(EventKind.FINISHED))
        hub.sync(timeout=10)


def test_a_critical_sink_goes_to_the_fatal_path_after_its_limit_in_a_row_and_others_never_do():
    fatal: list[str] = []
    called = threading.Event()

    def on_fatal(where: str, exc: BaseException) -> None:
        fatal.append(f"{where}: {exc}")
        called.set()

    critical, other = _Failing("nodes", critical_after=3), _Failing("mlflow", critical_after=None)
    hub = SinkHub([critical, other], on_fatal=on_fatal)
    hub.start()
    _batches(hub, 2)
    assert fatal == [] and critical.calls == 2  # two in a row: not yet
    _batches(hub, 1)
    assert called.wait(5)
    assert fatal == ["sink nodes (3 batches failed in a row): nodes is read-only"]
    _batches(hub, 3)
    hub.close()
    assert other.calls == 6 and all("mlflow" not in f for f in fatal)  # counted, never fatal
    failures = hub.failures()
    assert failures["mlflow"] == {"failures": 6, "last_error": "OSError: mlflow is read-only"}
    assert failures["nodes"]["failures"] == 6


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
