"""The run's in-memory state: what the head changes and the stages read, rebuilt in one place
from the node database when a run resumes.

Every piece here is a function of the run's nodes and a few metadata keys, so a resumed run
continues as the interrupted one would have: the pool (and its version), the update history,
the sampler (its history replayed), the counters, the validation case order, the plans and
promotions, the branch shares, the memo of evaluations and the
per-model outcomes a bandit router learns from.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from evoforge.evaluators.task import Task
from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.population.case_order import CaseOrder
from evoforge.stages.population.history import NEW_BEST, PoolHistory
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.repeats import RepeatMemo
from evoforge.stages.population.stats import RunStats
from evoforge.stages.rounds.branch_shares import BranchShares
from evoforge.stages.rounds.records import PLANS_META, PROMOTIONS_META, Rounds
from evoforge.stages.sample import ParentSampler, rebuild_sampler

POOL_VERSION_META, CASE_ORDER_META, WALL_S_META = "pool_version", "case_order", "wall_s"


class Lineage(Mapping[str, str | None]):
    """Node id -> parent id over the run's nodes (a view: nothing kept twice)."""

    def __init__(self, nodes: dict[str, Node]) -> None:
        self._nodes = nodes

    def __getitem__(self, node_id: str) -> str | None:
        return self._nodes[node_id].parent_id

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


@dataclass
class RunState:
    """Pool, sampler, history, counters and the run's other in-memory state."""

    pool: Pool
    sampler: ParentSampler
    history: PoolHistory
    stats: RunStats
    rounds: Rounds
    case_order: CaseOrder | None = None
    nodes: dict[str, Node] = field(default_factory=dict)  # every node of the run, its latest version
    shares: BranchShares = field(default_factory=BranchShares)
    repeats: RepeatMemo = field(default_factory=RepeatMemo)
    wall_s_before: float = 0.0
    started: float = field(default_factory=time.monotonic)

    @property
    def lineage(self) -> Lineage:
        return Lineage(self.nodes)

    def wall_s(self) -> float:
        """Wall seconds of the run over all its sessions."""
        return self.wall_s_before + time.monotonic() - self.started

    def all_nodes(self) -> list[Node]:
        """Every node of the run, oldest first (what the node database holds, without reading it)."""
        return sorted(self.nodes.values(), key=lambda n: (n.created_at, n.id))

    @classmethod
    def rebuild(cls, nodes: list[Node], meta: Mapping[str, Any], task: Task, cfg: RunConfig,
                cases: list[str] | None = None, held_out_cost: tuple[float, float] = (0.0, 0.0)) -> RunState:
        """The state as the node database has it (an empty list: a new run); `held_out_cost` is
        the (seconds, CPU seconds) the final report's evaluations took, counted with the rest."""
        level, maximize = task.search_level, task.direction == "maximize"
        pool, history = rebuild_pool(nodes, maximize, meta.get(POOL_VERSION_META, 0), cfg.judge.weight, level)
        case_order = None
        if cases:
            saved = meta.get(CASE_ORDER_META)
            same = saved and sorted(saved.get("order", [])) == sorted(cases)
            case_order = (CaseOrder.from_state(saved) if same
                          else CaseOrder(cases, window=cfg.speculation.reorder_window))
        rounds = Rounds.restore(meta.get(PLANS_META, []), meta.get(PROMOTIONS_META, []))
        return cls(pool=pool, sampler=rebuild_sampler(cfg.search, nodes, pool), history=history,
                   stats=RunStats.rebuild(nodes, held_out_cost), rounds=rounds, case_order=case_order,
                   nodes={n.id: n for n in nodes}, shares=BranchShares.rebuild(nodes),
                   repeats=RepeatMemo.rebuild(nodes, task), wall_s_before=meta.get(WALL_S_META, 0.0))


def rebuild_pool(nodes: list[Node], maximize: bool, v: int, judge_weight: float,
                 level: str = "full") -> tuple[Pool, PoolHistory]:
    """The pool, and its new-best history replayed in the order evaluations finished."""
    finished = sorted(nodes, key=lambda n: n.evaluated_at or n.created_at)
    seed = next((n for n in nodes if n.origin == "seed" and n.score(level) is not None), None)
    scale = (abs(seed.score(level)) or 1.0) if seed is not None else 1.0  # type: ignore[arg-type]
    pool = Pool.rebuild(finished, maximize, v, judge_weight=judge_weight, judge_scale=scale, level=level)
    history, best, version = PoolHistory(), None, 0
    for node in finished:
        if node.status == EVALUATED and node.score(level) is not None and pool.better(node, best):
            best, version = node, version + 1
            history.record(version, NEW_BEST, node)
    return pool, history
