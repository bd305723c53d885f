"""Prefect settings evoforge needs, applied before Prefect is imported (unless the user set them)."""

from __future__ import annotations

import os

DEFAULTS = {
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "false",
}


def apply_defaults() -> None:
    """Set evoforge's Prefect defaults in the environment, keeping any the user chose."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)


apply_defaults()
