"""The pareto sampler's front, kept from the pool's hooks, equals the front computed from scratch,
and the sampler draws the same parents as the from-scratch selection for the same seed."""

from __future__ import annotations

import random

import pytest

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample.pareto import ParetoSampler, case_wins, pareto_front

CASES = [f"v{i}" for i in range(6)]


def _scores(rng: random.Random, cases: list[str]) -> dict[str, float]:
    # few distinct values, so ties on a case (joint winners) are common
    return {c: float(rng.randint(0, 4)) for c in cases}


def _old_select(pool: Pool, rng: random.Random) -> Node:
    """The selection as it was before the front was kept incrementally (recomputed each time)."""
    front = pareto_front(pool)
    if not front:
        return pool.best if pool.best is not None else rng.choice(pool.nodes)
    wins = case_wins(pool)
    return rng.choices(front, weights=[wins[n.id] for n in front], k=1)[0]


@pytest.mark.parametrize("maximize", [True, False])
def test_the_kept_front_matches_a_brute_force_front_through_adds_removes_and_rescores(maximize):
    rng = random.Random(7)
    pool, sampler = Pool(maximize=maximize), ParetoSampler(SearchConfig(sampler="pareto"))
    checked = removed = rescored = 0
    for i in range(300):
        roll = rng.random()
        if roll < 0.15 and len(pool.nodes) > 3:  # a rolled-back node leaves
            node = rng.choice(pool.nodes)
            pool.remove(node)
            sampler.on_node_removed(node, pool)
            removed += 1
        elif roll < 0.3 and pool.nodes:  # a speculation confirmed on more cases (in place)
            node = rng.choice(pool.nodes)
            node.case_scores = {**node.case_scores, **_scores(rng, rng.sample(CASES, 3))}
            pool.rescore(node)
            sampler.on_node_rescored(node, pool)
            rescored += 1
        else:
            cases = rng.sample(CASES, rng.randint(0, len(CASES)))  # 0: a node not scored by case
            scores = _scores(rng, cases)
            node = Node(id=f"n{i}", run_id="r", code=f"# {i}", status=EVALUATED,
                        score_full=sum(scores.values()) / max(1, len(scores)), case_scores=scores)
            pool.add(node)
            sampler.on_node_added(node, pool)
        front, weights = sampler.front.members()
        expected = pareto_front(pool)
        wins = case_wins(pool)
        assert [n.id for n in front] == [n.id for n in expected]  # same members, same (pool) order
        assert weights == [wins[n.id] for n in expected]
        checked += 1
    assert checked == 300 and removed > 10 and rescored > 10


def test_the_sampler_picks_the_parents_the_recomputing_selection_picked():
    rng = random.Random(3)
    pool, sampler = Pool(), ParetoSampler(SearchConfig(sampler="pareto"))
    for i in range(400):
        scores = _scores(rng, rng.sample(CASES, rng.randint(1, len(CASES))))
        node = Node(id=f"n{i}", run_id="r", code=f"# {i}", status=EVALUATED,
                    score_full=sum(scores.values()) / len(scores), case_scores=scores)
        pool.add(node)
        sampler.on_node_added(node, pool)
    new = [sampler.select_parent(pool, random.Random(seed)).id for seed in range(200)]
    old = [_old_select(pool, random.Random(seed)).id for seed in range(200)]
    assert new == old and len(set(new)) > 1


def test_a_pool_filled_without_the_hooks_is_followed_at_the_next_selection():
    pool, sampler = Pool(), ParetoSampler(SearchConfig(sampler="pareto"))
    for name, scores in {"a": [1, 0], "b": [0, 1], "c": [0, 0]}.items():
        pool.add(Node(id=name, run_id="r", code=name, status=EVALUATED, score_full=sum(scores),
                      case_scores={f"v{i}": float(s) for i, s in enumerate(scores)}))
    assert {sampler.select_parent(pool, random.Random(s)).id for s in range(30)} == {"a", "b"}
    assert sampler.front.size == 3
