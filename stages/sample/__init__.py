"""Parent sampling policies; importing this package registers them all."""

from evoforge.stages.sample import greedy, islands, latest, map_elites, pareto, ucb1, uniform  # noqa: F401  (registration)
from evoforge.stages.sample.base import ParentSampler, make_sampler, sampler_names
from evoforge.stages.sample.resume import rebuild_sampler

__all__ = ["ParentSampler", "make_sampler", "rebuild_sampler", "sampler_names"]
