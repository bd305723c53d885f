"""The per-run log file (run.log in the run folder)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass
class RunLog:
    """The run.log handler on the `evoforge` logger, and the logger's level and propagation before."""

    handler: logging.Handler
    level: int
    propagate: bool


def attach_run_log(path: Path) -> RunLog:
    """Send evoforge's log records to `path` for the length of the run."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger = logging.getLogger("evoforge")
    attached = RunLog(handler, logger.level, logger.propagate)
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    logger.propagate = False
    return attached


def detach_run_log(attached: RunLog) -> None:
    """Put the `evoforge` logger back as it was before the run."""
    logger = logging.getLogger("evoforge")
    logger.removeHandler(attached.handler)
    logger.setLevel(attached.level)
    logger.propagate = attached.propagate
    attached.handler.close()
