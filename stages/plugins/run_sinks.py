"""The plug-in sinks of a run: every registered sink that can be made from the run's facts,
made once for the run (`Sink.for_run`); a sink that needs more is its stage's to make, and one a
stage of the run brought already (`Stage.sinks`) is not made twice."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from evoforge.evaluators.task import Task
from evoforge.infra.config import RunConfig
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.plugins.registry import SINKS, use_plugins
from evoforge.stages.sinks.base import Sink
from evoforge.stages.sinks.run_basics import RunBasics


def plugin_sinks(present: Sequence[Sink], *, run_id: str, task: Task, config: RunConfig,
                 paths: RunPaths) -> list[Sink]:
    """One instance of each plug-in sink (installed, or in the run's `--plugin` files) for this run,
    but for the classes among the sinks `present` (the session's and its stages')."""
    use_plugins(config.engine.plugins)  # the run's files registered (idempotent)
    run = RunBasics(run_id=run_id, task=task, config=config, paths=paths)
    brought = {type(sink) for sink in present}
    return [SINKS[name].for_run(run) for name in SINKS
            if plugs_in_alone(SINKS[name]) and SINKS[name] not in brought]


def plugs_in_alone(cls: type[Sink]) -> bool:
    """True when the sink is made per run from the run's facts: it says how (`for_run`), or it
    takes no constructor argument; a sink that needs arguments is made by its stage (`sinks`)."""
    if cls.for_run.__func__ is not Sink.for_run.__func__:
        return True
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in inspect.signature(cls).parameters.values())
