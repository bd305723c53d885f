"""The per-run log file (run.log in the run folder)."""

from __future__ import annotations

import logging
from pathlib import Path

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def attach_run_log(path: Path) -> logging.Handler:
    """Send evoforge's log records to `path` for the length of the run; returns the handler."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger = logging.getLogger("evoforge")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    logger.propagate = False
    return handler


def detach_run_log(handler: logging.Handler) -> None:
    logger = logging.getLogger("evoforge")
    logger.removeHandler(handler)
    logger.propagate = True  # as it was: the next run, or the caller's logging, sees evoforge again
    handler.close()
