"""Parent sampling policies: one module each, registered as plug-ins are (entry points named
`sampler.*`, evoforge's own included; `stages/sample/base.py` holds the registry)."""

from evoforge.stages.sample.base import SAMPLERS, ParentSampler, make_sampler, sampler_class, sampler_names
from evoforge.stages.sample.resume import rebuild_sampler

__all__ = ["SAMPLERS", "ParentSampler", "make_sampler", "rebuild_sampler", "sampler_class", "sampler_names"]
