"""Test settings: a private Prefect home, no analytics, quiet logs (set before Prefect loads)."""

from __future__ import annotations

import os
import tempfile

_PREFECT_HOME = tempfile.mkdtemp(prefix="evoforge-test-prefect-")
os.environ["PREFECT_HOME"] = _PREFECT_HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.pop("EVOFORGE_LLM_BASE_URL", None)
os.environ.pop("EVOFORGE_LLM_MODEL", None)

from tests.real_model import real_model  # noqa: E402, F401  (a session fixture: SmolLM2 served once)
