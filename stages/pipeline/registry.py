"""The stage plug-ins of a run, in pipeline order (the first one is where new items enter).

A new stage is a new module with one `Stage` subclass and a line here; nothing in the engine
changes. Stages a run does not use say so through `Stage.enabled` (reflect, for instance, only
runs under the reflective staleness policy).
"""

from __future__ import annotations

from evoforge.stages.analyze import Analyze
from evoforge.stages.debug import Debug
from evoforge.stages.engineer import Engineer
from evoforge.stages.judge import Judge
from evoforge.stages.learn import Learn
from evoforge.stages.param_search import ParamSearch
from evoforge.stages.pipeline.stage import Stage
from evoforge.stages.reflect import Reflect
from evoforge.stages.research import Research


def default_stages() -> list[Stage]:
    """learn → research → engineer → [debug] → [param_search] → [judge] → analyze → commit, with
    reflect reached from the engineer's door. Stages spliced in `after` the same stage run in
    reverse list order: the last one listed runs first behind it."""
    return [Learn(), Research(), Engineer(), Reflect(), Analyze(), Judge(), ParamSearch(), Debug()]
