"""Parsing Python while other threads parse too never fails spuriously (CPython 3.11 race)."""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path

import pytest

from evoforge.infra import pyast

SOURCE = (Path(__file__).resolve().parent.parent / "evaluators" / "task.py").read_text()


class _Finalized:
    """Cyclic garbage whose finalizer runs Python code, so the GC switches threads mid-parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(50))


@pytest.fixture
def thread_switches_everywhere():
    interval, threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 1, 1)
    yield
    sys.setswitchinterval(interval)
    gc.set_threshold(*threshold)


def _hammer(parse) -> list[BaseException]:
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(40):
            junk = [_Finalized() for _ in range(200)]
            del junk
            try:
                parse(SOURCE, "task.py")
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_concurrent_parses_all_succeed(thread_switches_everywhere):
    assert _hammer(pyast.parse) == []


def test_syntax_errors_still_raise():
    with pytest.raises(SyntaxError) as info:
        pyast.parse("def f(:\n", "bad.py")
    assert info.value.filename == "bad.py"
