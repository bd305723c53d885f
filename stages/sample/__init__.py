"""Parent sampling policies; importing this package registers them all."""

from evoforge.stages.sample import greedy, uniform  # noqa: F401  (registration)
from evoforge.stages.sample.base import ParentSampler, make_sampler, sampler_names

__all__ = ["ParentSampler", "make_sampler", "sampler_names"]
