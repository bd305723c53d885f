"""The one base class of the parent samplers, with every hook the engine calls, and their registry.

A sampler only has to say which parent comes next; the base follows the pool for it (descendant
credit, the add / remove / rescore hooks) and gives every other hook a neutral default:

    >>> import random
    >>> from evoforge.infra.config import SearchConfig
    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.population.pool import Pool
    >>> class Newest(ParentSampler):
    ...     def select_parent(self, pool, rng):
    ...         return pool.nodes[-1]
    >>> sampler, pool, rng = Newest(SearchConfig()), Pool(), random.Random(0)
    >>> for i, score in enumerate([1.0, 3.0, 2.0]):  # a lineage: n0 -> n1 -> n2
    ...     node = Node(id=f"n{i}", run_id="demo", code="x = 1", score_full=score,
    ...                 parent_id=f"n{i - 1}" if i else None)
    ...     _ = pool.add(node)
    ...     sampler.on_node_added(node, pool)
    >>> parent, island = sampler.select_parent_and_island(pool, rng)
    >>> parent.id, island
    ('n2', 0)
    >>> [n.id for n in sampler.diverse_nodes(parent, pool, rng, k=2)]
    ['n1', 'n0']
    >>> sampler.get_state()
    {'credit': {'n0': 2.0}}
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.infra.plugin_registry import Registry
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.credit import DescendantCredit


class ParentSampler(ABC):
    """Chooses the parent of the next candidate from the pool, and follows the pool's changes.

    Subclasses implement `select_parent` and, when they keep state, `_added` / `_removed` /
    `_rescored` / `_state`; the other hooks have defaults that suit a policy without islands or a
    notion of diversity. State is a function of the calls made (nodes added and removed,
    selections) and of nothing else: `_added` may read the node's own score but not pool-wide
    figures (the best, the score range), so replaying those calls from the node database
    (`rebuild_sampler`) restores it.
    """

    name: ClassVar[str]  # `search.sampler`: set here or by `@register(name)`

    def __init__(self, cfg: SearchConfig):
        self.cfg = cfg
        self.credit = DescendantCredit(cfg.credit_decay)

    @abstractmethod
    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        """The parent of the next candidate."""

    def select_parent_and_island(self, pool: Pool, rng: random.Random) -> tuple[Node, int]:
        """The parent, and the island its child will live on (by default the parent's)."""
        parent = self.select_parent(pool, rng)
        return parent, parent.island

    def on_node_added(self, node: Node, pool: Pool) -> None:
        """A node entered the pool (evaluated, or speculative on a partial score)."""
        self.credit.add(node, pool)
        self._added(node, pool)

    def on_node_removed(self, node: Node, pool: Pool) -> None:
        """A node left the pool (a rolled-back speculation): undo what its arrival did."""
        self.credit.remove(node)
        self._removed(node, pool)

    def on_node_rescored(self, node: Node, pool: Pool) -> None:
        """A node's score changed in place (a speculation confirmed on its full score)."""
        self.credit.rescore(node, pool)
        self._rescored(node, pool)

    def replay_selection(self, child: Node, pool: Pool) -> None:
        """Account for the selection that produced `child` (resume: selections are not re-run)."""
        return None

    def diverse_nodes(self, parent: Node, pool: Pool, rng: random.Random, k: int) -> list[Node]:
        """Up to k nodes unlike the parent, for the prompt's 'diverse' inspirations (by default
        random pool nodes)."""
        return random_nodes(pool, rng, k, exclude={parent.id})

    def get_state(self) -> dict[str, Any]:
        """The sampler's state as plain data (equal states select alike)."""
        return {"credit": self.credit.state(), **self._state()}

    def _added(self, node: Node, pool: Pool) -> None:
        return None

    def _removed(self, node: Node, pool: Pool) -> None:
        return None

    def _rescored(self, node: Node, pool: Pool) -> None:
        return None

    def _state(self) -> dict[str, Any]:
        return {}

    def _weighted_elite(self, elites: list[Node], pool: Pool, rng: random.Random) -> Node:
        """One of `elites`: uniform, or weighted by 1 + credit_weight * credit when credit is on."""
        if self.cfg.credit_weight <= 0 or len(elites) == 1:
            return rng.choice(elites)
        weights = [1.0 + self.cfg.credit_weight * self.credit.normalized(n, pool) for n in elites]
        return rng.choices(elites, weights=weights)[0]


def random_nodes(pool: Pool, rng: random.Random, k: int, exclude: set[str]) -> list[Node]:
    """Up to k distinct random pool nodes not in `exclude`, in O(k) draws."""
    out: list[Node] = []
    if not pool.nodes:
        return out
    seen = set(exclude)
    available = len(pool.nodes) - sum(1 for i in exclude if pool.get(i) is not None)
    for _ in range(4 * k + 8):
        if len(out) >= min(k, available):
            break
        node = rng.choice(pool.nodes)
        if node.id not in seen:
            seen.add(node.id)
            out.append(node)
    return out


SAMPLERS: Registry[ParentSampler] = Registry("sampler", ParentSampler, prefix="sampler")
"""Every sampler, by name: entry points named `sampler.*` (evoforge's own and installed packages'),
and the run's `--plugin` files (handed in by `stages/plugins`)."""


def register(name: str) -> Callable[[type[ParentSampler]], type[ParentSampler]]:
    """Class decorator naming a sampler `name` (the same as setting `name = ...` in the class);
    the registry finds it in its module (an entry point's, or a `--plugin` file)."""

    def wrap(cls: type[ParentSampler]) -> type[ParentSampler]:
        cls.name = name
        return cls

    return wrap


def sampler_class(name: str) -> type[ParentSampler]:
    """The sampler registered as `name`; KeyError (one line naming the known ones) otherwise."""
    if name not in SAMPLERS:
        raise KeyError(SAMPLERS.unknown(name))
    return SAMPLERS[name]


def make_sampler(cfg: SearchConfig) -> ParentSampler:
    """The sampler the config names."""
    return sampler_class(cfg.sampler)(cfg)


def sampler_names() -> list[str]:
    """The registered policy names, sorted."""
    return sorted(SAMPLERS)
