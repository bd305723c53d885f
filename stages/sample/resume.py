"""Rebuild a sampler from the node database, so a resumed run selects as the interrupted one would."""

from __future__ import annotations

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.pool import Pool
from evoforge.stages.sample.base import ParentSampler, make_sampler


def replay(sampler: ParentSampler, nodes: list[Node], pool: Pool) -> ParentSampler:
    """Feed `sampler` the run's history: the pool's members in the order they entered it (the
    rebuilt pool keeps that order), then one selection per non-seed node, whatever became of it
    (`nodes` in creation order; a sampler ignores selections of parents no longer in the pool)."""
    for node in pool.nodes:
        sampler.on_node_added(node, pool)
    replay_selection = getattr(sampler, "replay_selection", None)
    if replay_selection is not None:
        for node in nodes:
            if node.origin != "seed" and node.parent_id is not None:
                replay_selection(node, pool)
    return sampler


def rebuild_sampler(cfg: SearchConfig, nodes: list[Node], pool: Pool) -> ParentSampler:
    """A new sampler of the configured policy with the run's history replayed into it."""
    return replay(make_sampler(cfg), nodes, pool)
