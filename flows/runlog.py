"""The per-run log file (run.log in the run folder), and the CLI's run that keeps failures there.

A run started by the CLI logs to run.log from the moment its folder is known: Prefect's
flow-run and task-run error records and Python warnings (a library's UserWarning) go there
instead of the terminal (each traceback once), and so does any exception that ends the run,
while the terminal shows the CLI's one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from evoforge.infra.disk_full import disk_full_error

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PREFECT_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")

log = logging.getLogger("evoforge.cli")


class _OneTraceback(logging.Formatter):
    """Write each exception's traceback once: a later record of the same exception (Prefect's, or
    the CLI's) keeps its line only."""

    def __init__(self) -> None:
        super().__init__(_FORMAT)
        # the latest few only: the repeats come right after (exceptions cannot be weakly referenced,
        # and holding every one would hold its frames for the length of the run)
        self._written: deque[BaseException] = deque(maxlen=8)

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not any(exc is seen for seen in self._written):
            if exc is not None:
                self._written.append(exc)
            return super().format(record)
        kept = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None  # (other handlers see the record unchanged)
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text = kept


class _RunLogHandler(logging.FileHandler):
    """run.log; a record that cannot be written because the disk is full is dropped (counted in
    `dropped`) instead of printing logging's "--- Logging error ---" and a traceback on the
    terminal: the run stops with one line saying the disk is full."""

    dropped = 0

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if disk_full_error(sys.exc_info()[1]) is not None:
            self.dropped += 1
            return
        super().handleError(record)

    def close(self) -> None:
        try:
            super().close()
        except OSError as exc:  # the last lines could not be flushed: the disk is full
            if disk_full_error(exc) is None:
                raise
            self.dropped += 1


class _FolderFileHandler(_RunLogHandler):
    """run.log, opened when the run folder exists: a record before the run made it is dropped (the
    CLI's one line has said it), so a command refused early leaves no folder behind."""

    def __init__(self, path: Path):
        super().__init__(path, encoding="utf-8", delay=True)

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not None or os.path.isdir(os.path.dirname(self.baseFilename)):
            super().emit(record)


def _handler(path: Path, when_folder_exists: bool = False) -> logging.FileHandler:
    handler = _FolderFileHandler(path) if when_folder_exists else _RunLogHandler(path, encoding="utf-8")
    handler.setFormatter(_OneTraceback())
    return handler


@dataclass
class RunLog:
    """The run.log handler on the `evoforge` logger, and the logger's level and propagation before."""

    handler: logging.Handler
    level: int
    propagate: bool
    owned: bool = True  # False: the handler was already attached (by the CLI); detaching leaves it
    also_on: list[logging.Logger] = field(default_factory=list)


def _attached(path: Path) -> logging.FileHandler | None:
    wanted = os.path.abspath(path)
    return next((h for h in logging.getLogger("evoforge").handlers
                 if isinstance(h, logging.FileHandler) and h.baseFilename == wanted), None)


def attach_run_log(path: Path, when_folder_exists: bool = False) -> RunLog:
    """Send evoforge's log records to `path` for the length of the run (once, if already sent)."""
    logger = logging.getLogger("evoforge")
    existing = _attached(path)
    if existing is not None:
        return RunLog(existing, logger.level, logger.propagate, owned=False)
    handler = _handler(path, when_folder_exists)
    attached = RunLog(handler, logger.level, logger.propagate)
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    logger.propagate = False
    return attached


def detach_run_log(attached: RunLog) -> None:
    """Put the `evoforge` logger back as it was before the run."""
    for other in attached.also_on:
        other.removeHandler(attached.handler)
    if not attached.owned:
        return
    logger = logging.getLogger("evoforge")
    logger.removeHandler(attached.handler)
    logger.setLevel(attached.level)
    logger.propagate = attached.propagate
    attached.handler.close()


class _NotOnTerminal(logging.Filter):
    """Keep Prefect's flow-run and task-run errors off the terminal (they are in run.log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and record.name.startswith(PREFECT_RUN_LOGGERS))


@contextlib.contextmanager
def cli_run_log(path: Path) -> Iterator[RunLog]:
    """For the length of a CLI run: evoforge's records and Prefect's run errors in `path`, not
    on the terminal; an exception that ends the run is logged there with its traceback (once).
    Nothing is written before the run has made its folder."""
    attached = attach_run_log(path, when_folder_exists=True)
    for name in PREFECT_RUN_LOGGERS:
        prefect_logger = logging.getLogger(name)
        prefect_logger.addHandler(attached.handler)
        attached.also_on.append(prefect_logger)
    warnings_logger = logging.getLogger("py.warnings")
    warnings_propagate = warnings_logger.propagate
    warnings_logger.addHandler(attached.handler)
    attached.also_on.append(warnings_logger)
    warnings_logger.propagate = False
    logging.captureWarnings(True)
    quiet = _NotOnTerminal()
    terminal = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)
                and not isinstance(h, logging.FileHandler)]
    for handler in terminal:
        handler.addFilter(quiet)
    try:
        yield attached
    except BaseException as exc:  # logged with its traceback, then on to the CLI's one line
        log.error("the run stopped: %s: %s", type(exc).__name__, exc, exc_info=exc)
        raise
    finally:
        logging.captureWarnings(False)
        warnings_logger.propagate = warnings_propagate
        for handler in terminal:
            handler.removeFilter(quiet)
        detach_run_log(attached)
