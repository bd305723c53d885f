"""ace: ACE's agentic context engineering on the engine's asynchronous stages.

Each step: `generate` runs the newest playbook (`search.sampler: latest`, this algorithm's
default) on the stream's next `ace.batch` cases with the task model (offline: the train cases,
round and round; online: the val cases once each, in order); `reflector` has the LLM diagnose those
trajectories and tag the bullets they used; `curator` has it answer with delta operations, and the
tags are merged as counters; the `engineer` validates the new playbook on the val cases. The
playbook grows and is refined item by item, never rewritten. For playbook tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

from evoforge.stages.algorithms.base import Algorithm
from evoforge.stages.curator import Curator
from evoforge.stages.engineer import Engineer
from evoforge.stages.generate import Generate
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.reflect import Reflect
from evoforge.stages.reflector import Reflector
from evoforge.stages.sinks.ace_stream import AceStream
from evoforge.stages.sinks.base import Sink


class StreamGenerate(Generate):
    """The generator, bringing the sink that keeps the stream's figures."""

    def sinks(self, ctx: RunView) -> Sequence[Sink]:
        return [AceStream(ctx.config.ace.mode, self.position)]


class Ace(Algorithm):
    """generate -> reflector -> curator -> engineer -> head; reflect (staleness) on the side."""

    name = "ace"
    about = "ACE: generator, reflector, curator on a playbook; offline (train) or online (val stream)"
    kinds = ("playbook",)
    defaults = {"search": {"sampler": "latest"}, "cognition": {"enabled": False}}

    def pipeline(self) -> Pipeline:
        return Pipeline(line=(StreamGenerate(), Reflector(), Curator(), Engineer()), side=(Reflect(),))
