"""Prefect settings evoforge needs, applied before Prefect is imported (unless the user set them)."""

from __future__ import annotations

import functools
import logging
import os

from evoforge.infra.reaper import Reaper, start_reaper

DEFAULTS = {
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "false",
    # the ephemeral server takes ~10 s to start on 2 idle cores; Prefect gives up after 20 s, which a
    # busy machine exceeds (measured: a start under load timed out); waiting longer costs nothing
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
}


def apply_defaults() -> None:
    """Set evoforge's Prefect defaults in the environment, keeping any the user chose."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
    # At exit Prefect sends the events still queued (artifacts, the last task runs) and says so on
    # the terminal ("EventsWorker - Still processing items"): nothing a user can act on
    logging.getLogger("EventsWorker").setLevel(logging.ERROR)


@functools.cache
def guard_children() -> Reaper | None:
    """Start (once per process) the watchdog that stops Prefect's ephemeral server and the run's
    evaluation children if this process dies without stopping them, e.g. by SIGKILL."""
    return start_reaper()


apply_defaults()
