"""Island-model parent sampling: separate sub-populations joined by ring migration.

The seed's first children are spread over the islands in turn; later ones stay on their parent's:

    >>> import random
    >>> from evoforge.infra.config import SearchConfig
    >>> from evoforge.infra.nodes import Node
    >>> from evoforge.stages.population.pool import Pool
    >>> sampler = IslandsSampler(SearchConfig(sampler="islands", islands=3))
    >>> pool, rng = Pool(), random.Random(0)
    >>> seed = Node(id="seed", run_id="demo", code="x = 1", score_full=1.0)
    >>> _ = pool.add(seed)
    >>> sampler.on_node_added(seed, pool)
    >>> for i in range(6):
    ...     parent, island = sampler.select_parent_and_island(pool, rng)
    ...     child = Node(id=f"c{i}", run_id="demo", code="x = 1", parent_id=parent.id, island=island,
    ...                  score_full=2.0 + i)
    ...     _ = pool.add(child)
    ...     sampler.on_node_added(child, pool)
    >>> [[n.id for n in island.ranking] for island in sampler.islands]
    [['c3', 'c0', 'seed'], ['c4', 'c1'], ['c5', 'c2']]
"""

from __future__ import annotations

import bisect
import random
from typing import Any

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.base import ParentSampler, random_nodes, register


class Island:
    """One sub-population, ranked best first on insertion (equal scores: earliest first)."""

    def __init__(self) -> None:
        self._keys: list[float] = []
        self.ranking: list[Node] = []
        self.ids: set[str] = set()
        self.natives = 0

    def __len__(self) -> int:
        return len(self.ranking)

    def __contains__(self, node_id: str) -> bool:
        return node_id in self.ids

    def add(self, node: Node, score: float) -> None:
        at = bisect.bisect_right(self._keys, -score)
        self._keys.insert(at, -score)
        self.ranking.insert(at, node)
        self.ids.add(node.id)

    def remove(self, node_id: str) -> None:
        at = next(i for i, n in enumerate(self.ranking) if n.id == node_id)
        del self._keys[at], self.ranking[at]
        self.ids.discard(node_id)

    def top(self, k: int) -> list[Node]:
        return self.ranking[:k]


@register("islands")
class IslandsSampler(ParentSampler):
    """Serves the islands in turn; on the served island, p=exploitation its best node,
    p=exploration a uniform member, else one of its top `elite_size` (credit-weighted if on).

    The child belongs to the served island (`select_parent_and_island`; the sample stage puts
    it there), so lineages stay home even when the parent is a migrant. An island with no
    members yet is started from the run's first node: the first children of the seed are spread
    over the islands round-robin. Every `migration_interval` generations (a generation: one
    arrival per island) each island i sends its best `migration_rate` share (at least one) to
    island i+1 of the ring, by reference, skipping nodes already there.
    """

    def __init__(self, cfg: SearchConfig):
        super().__init__(cfg)
        self.turn = 0  # selections so far: the next serves island turn % islands
        self._reset()

    def _reset(self) -> None:
        self.islands = [Island() for _ in range(self.cfg.islands)]
        self.root: Node | None = None
        self.arrivals: list[Node] = []  # nodes added, in order (migrants are not arrivals)
        self.migrations: list[tuple[int, list[tuple[str, int]]]] = []  # (arrivals, [(node, to)])
        self._home: dict[str, int] = {}
        self._score: dict[str, float] = {}

    @property
    def generation(self) -> int:
        return len(self.arrivals) // self.cfg.islands

    def island_of(self, node: Node) -> int | None:
        """The island the node was born on, when it is in the pool."""
        return self._home.get(node.id)

    def select_parent(self, pool: Pool, rng: random.Random) -> Node:
        return self.select_parent_and_island(pool, rng)[0]

    def select_parent_and_island(self, pool: Pool, rng: random.Random) -> tuple[Node, int]:
        """A parent and the island its child will live on."""
        served = self.turn % self.cfg.islands
        self.turn += 1
        island = self.islands[served]
        if not island.ranking:
            start = self.root if self.root is not None else (pool.best or rng.choice(pool.nodes))
            return start, served
        draw = rng.random()
        if draw < self.cfg.exploitation:
            return island.ranking[0], served
        if draw < self.cfg.exploitation + self.cfg.exploration:
            return rng.choice(island.ranking), served
        return self._weighted_elite(island.top(self.cfg.elite_size), pool, rng), served

    def replay_selection(self, child: Node, pool: Pool) -> None:
        self.turn += 1

    def diverse_nodes(self, parent: Node, pool: Pool, rng: random.Random, k: int) -> list[Node]:
        """The best nodes of the other islands, nearest along the ring first."""
        home = self._home.get(parent.id, 0)
        out: list[Node] = []
        seen = {parent.id}
        for step in range(1, self.cfg.islands):
            for node in self.islands[(home + step) % self.cfg.islands].top(2):
                if node.id not in seen:
                    out.append(node)
                    seen.add(node.id)
                    break
            if len(out) >= k:
                return out
        return out + random_nodes(pool, rng, k - len(out), exclude=seen)

    def _added(self, node: Node, pool: Pool) -> None:
        if self.root is None:
            self.root = node
        home = node.island % self.cfg.islands
        self._home[node.id] = home
        self._score[node.id] = pool.score(node)
        self.islands[home].add(node, self._score[node.id])
        self.islands[home].natives += 1
        self.arrivals.append(node)
        every = self.cfg.migration_interval * self.cfg.islands
        if self.cfg.islands > 1 and len(self.arrivals) % every == 0:
            self._migrate()

    def _migrate(self) -> None:
        """Ring migration, planned on the islands as they are before anyone moves."""
        n = self.cfg.islands
        plan: list[tuple[Node, int]] = []
        for i, island in enumerate(self.islands):
            target = (i + 1) % n
            count = max(1, int(len(island) * self.cfg.migration_rate)) if self.cfg.migration_rate else 0
            plan += [(m, target) for m in island.top(count) if m.id not in self.islands[target]]
        for node, target in plan:
            self.islands[target].add(node, self._score[node.id])
        self.migrations.append((len(self.arrivals), [(m.id, t) for m, t in plan]))

    def _removed(self, node: Node, pool: Pool) -> None:
        if node.id not in self._home:
            return
        arrived = next(i for i, n in enumerate(self.arrivals) if n.id == node.id) + 1
        if node is self.root or (self.migrations and self.migrations[-1][0] >= arrived):
            rest = [n for n in self.arrivals if n.id != node.id]  # a migration saw it: replay
            self._reset()
            for other in rest:
                self._added(other, pool)
            return
        home = self._home.pop(node.id)
        self.islands[home].remove(node.id)
        self.islands[home].natives -= 1
        self._score.pop(node.id)
        del self.arrivals[arrived - 1]

    def _rescored(self, node: Node, pool: Pool) -> None:
        if node.id not in self._score:
            return
        self._score[node.id] = pool.score(node)
        for island in self.islands:
            if node.id in island:
                island.remove(node.id)
                island.add(node, self._score[node.id])

    def _state(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "arrivals": [n.id for n in self.arrivals],
            "islands": [[n.id for n in island.ranking] for island in self.islands],
            "natives": [island.natives for island in self.islands],
            "migrations": [[at, [list(m) for m in moved]] for at, moved in self.migrations],
        }
