"""The stage plug-ins of a run, in pipeline order (the first one is where new items enter).

A new stage is a new module with one `Stage` subclass and a line here; nothing in the engine
changes. Stages a run does not use say so through `Stage.enabled` (reflect, for instance, only
runs under the reflective staleness policy).
"""

from __future__ import annotations

from evoforge.stages.engineer import Engineer
from evoforge.stages.reflect import Reflect
from evoforge.stages.research import Research
from evoforge.stages.stage import Stage


def default_stages() -> list[Stage]:
    """research → engineer → commit, with reflect reached from the engineer's door."""
    return [Research(), Engineer(), Reflect()]
