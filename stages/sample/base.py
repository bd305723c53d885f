"""The ParentSampler protocol and the registry of sampling policies."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.pool import Pool


class ParentSampler(Protocol):
    """Chooses the parent of the next candidate from the pool."""

    def select_parent(self, pool: Pool, rng: random.Random) -> Node: ...

    def on_node_added(self, node: Node, pool: Pool) -> None: ...


_REGISTRY: dict[str, Callable[[SearchConfig], ParentSampler]] = {}


def register(name: str) -> Callable:
    """Class decorator adding a sampler under `name`."""

    def wrap(factory: Callable[[SearchConfig], ParentSampler]) -> Callable:
        _REGISTRY[name] = factory
        return factory

    return wrap


def make_sampler(cfg: SearchConfig) -> ParentSampler:
    """The sampler the config names."""
    return _REGISTRY[cfg.sampler](cfg)


def sampler_names() -> list[str]:
    return sorted(_REGISTRY)
