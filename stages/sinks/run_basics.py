"""The read-only facts of a run a plug-in sink is made from (`Sink.for_run`)."""

from __future__ import annotations

from dataclasses import dataclass

from evoforge.evaluators.task import Task
from evoforge.infra.config import RunConfig
from evoforge.infra.runfiles import RunPaths


@dataclass(frozen=True)
class RunBasics:
    """What a run is: its id, its task, its config and its folder's paths (`paths.root`)."""

    run_id: str
    task: Task
    config: RunConfig
    paths: RunPaths
