"""asi-evolve: ASI-Evolve's learn -> design -> experiment -> analyze loop, with ml-evolve's roles
for tasks with a pilot level (param search on knobs; the plan agent and promotion run beside it
as round jobs), and FlashEvolve's reflection on stale items.

The main line, in the order items pass through it; a run leaves out the stages it does not use
(`Stage.enabled`): learn without a cognition base, debug with no repair attempts, param search
when off, judge at weight 0, analyze when off, verify when analyze is off or `verify_share` is 0.
Reflect is a side stage, reached from the engineer's door under the reflective staleness policy.
"""

from __future__ import annotations

from evoforge.stages.algorithms.base import Algorithm
from evoforge.stages.analyze import Analyze
from evoforge.stages.debug import Debug
from evoforge.stages.engineer import Engineer
from evoforge.stages.judge import Judge
from evoforge.stages.learn import Learn
from evoforge.stages.param_search import ParamSearch
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.reflect import Reflect
from evoforge.stages.research import Research
from evoforge.stages.verify import Verify

NAME = "asi-evolve"


class AsiEvolve(Algorithm):
    """The default algorithm (`engine.algorithm: asi-evolve`): every artifact kind, a plug-in's
    too (`kinds` lists the built-in ones), no defaults."""

    name = NAME
    about = "ASI-Evolve's learn, design, experiment, analyze loop; ml-evolve's roles; reflection"
    kinds = ("program", "files", "text", "playbook")

    def evolves(self, kind: str) -> bool:
        return True

    def pipeline(self) -> Pipeline:
        return pipeline()


def pipeline() -> Pipeline:
    """learn -> research -> engineer -> debug -> param_search -> judge -> analyze -> verify -> head;
    reflect on the side."""
    return Pipeline(line=(Learn(), Research(), Engineer(), Debug(), ParamSearch(), Judge(), Analyze(),
                          Verify()),
                    side=(Reflect(),))
