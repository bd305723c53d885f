"""The options of every Prefect task evoforge defines: no result cache, no persisted results, no
retries (an evaluation or a stage run is recorded by evoforge itself, and a retry would run it
twice)."""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import NO_CACHE

TASK_OPTIONS: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False, "retries": 0}
