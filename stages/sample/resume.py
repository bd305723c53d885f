"""Rebuild a sampler from the node database, so a resumed run selects as the interrupted one would."""

from __future__ import annotations

from typing import Any

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler, make_sampler

SAMPLER_STATE_META = "sampler_state"  # the state a session closed with (meta of the node database)


def replay(sampler: ParentSampler, nodes: list[Node], pool: Pool) -> ParentSampler:
    """Feed `sampler` the run's history: the pool's members in the order they entered it (the
    rebuilt pool keeps that order), then one selection per non-seed node, whatever became of it
    (`nodes` in creation order; a sampler ignores selections of parents no longer in the pool)."""
    for node in pool.nodes:
        sampler.on_node_added(node, pool)
    for node in nodes:
        if node.origin != "seed" and node.parent_id is not None:
            sampler.replay_selection(node, pool)
    return sampler


def rebuild_sampler(cfg: SearchConfig, nodes: list[Node], pool: Pool) -> ParentSampler:
    """A new sampler of the configured policy with the run's history replayed into it."""
    return replay(make_sampler(cfg), nodes, pool)


def sampler_state(sampler: ParentSampler) -> dict[str, Any]:
    """The sampler's state as plain data (the session's closing meta), to compare with a rebuild."""
    return sampler.get_state()
