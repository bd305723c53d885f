"""Prefect's temporary local server, started before the flow with its output in the run's log.

With no `PREFECT_API_URL`, the first flow run of a process starts Prefect's temporary server: a
subprocess that writes to the terminal the run was started from. When Prefect stops it at exit,
its task-run recorder's last flush can be cancelled mid-write, and it logs a page of
`CancelledError` tracebacks ("Error flushing 1 events") under the run's result. Started here
first, the same instance Prefect's clients would start on their own (one per port), its stdout
and stderr go to run.log: the terminal keeps evoforge's lines, and nothing the server says is lost.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

SERVER_START_S = 90  # starting races the run's own start for CPU: more patience than Prefect's 20 s


def needs_temporary_server() -> bool:
    """True when Prefect would start its temporary server: no API URL set (env or profile)."""
    return not PREFECT_API_URL.value()


@contextlib.contextmanager
def _stdio_to(path: Path) -> Iterator[None]:
    """This process's fds 1 and 2 on `path` (appended) for the block: what it starts inherits them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for kept in (fd, *saved):
            os.close(kept)


def start_temporary_server(log_path: Path | None) -> Any:
    """Start Prefect's temporary server (a no-op if it runs already) and return it; with
    `log_path`, the server process writes there instead of on this process's terminal."""
    from prefect.server.api.server import SubprocessASGIServer  # the server's app: only when needed

    server = SubprocessASGIServer()
    launch = getattr(server, "_run_uvicorn_command", None)
    if log_path is not None and not server.running and callable(launch):
        def launch_into_log() -> Any:  # only the Popen: fds 1 and 2 move for microseconds
            with _stdio_to(log_path):
                return launch()
        server._run_uvicorn_command = launch_into_log
    try:
        server.start(max(SERVER_START_S, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
    finally:
        server.__dict__.pop("_run_uvicorn_command", None)  # a later restart uses Prefect's own
    return server
