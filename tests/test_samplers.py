"""Parent-sampling policies: what each one selects, how its state follows the pool, and resume."""

from __future__ import annotations

import argparse
import json
import math
import random
from collections import Counter

import pytest

from evoforge.flows.bench_cli import add_bench_parser, run_bench
from evoforge.flows.prepare import check_sampler
from evoforge.infra.config import ConfigError, SearchConfig
from evoforge.infra.config_load import load_config
from evoforge.infra.nodes import EVALUATED, FAILED, SPECULATIVE, Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample import ParentSampler, make_sampler, rebuild_sampler, sampler_names
from evoforge.stages.sample.credit import DescendantCredit
from evoforge.stages.sample.greedy import GreedySampler
from evoforge.stages.sample.islands import IslandsSampler
from evoforge.stages.sample.latest import LatestSampler
from evoforge.stages.sample.map_elites import MapElitesSampler
from evoforge.stages.sample.pareto import ParetoSampler
from evoforge.stages.sample.ucb1 import UCB1Sampler
from evoforge.stages.sample.uniform import UniformSampler

PROGRAM = """import math

# EVOLVE-BLOCK-START
def solve(n):
    total = 0.0
    for i in range(n):
        total += math.sqrt(i) * {a}
    return total {op} {b}
# EVOLVE-BLOCK-END
"""

_clock = iter(range(10**9))


def node(nid: str, score: float, parent: Node | None = None, island: int | None = None,
         a: float = 1.0, op: str = "+", b: float = 0.0, status: str = EVALUATED) -> Node:
    """A node with a small program; its island is its parent's unless given."""
    tick = float(next(_clock))
    return Node(id=nid, run_id="t", code=PROGRAM.format(a=a, op=op, b=b),
                parent_id=parent.id if parent else None,
                island=island if island is not None else (parent.island if parent else 0),
                generation=parent.generation + 1 if parent else 0, origin="novel" if parent else "seed",
                score_full=score if status == EVALUATED else None, status=status,
                created_at=tick, evaluated_at=tick)


def add(pool: Pool, sampler, *nodes: Node) -> None:
    for n in nodes:
        pool.add(n)
        sampler.on_node_added(n, pool)


def cfg(**kw) -> SearchConfig:
    return SearchConfig(**kw)


# --- selectable by config ---------------------------------------------------------------------

def test_every_policy_is_selectable_by_config(tmp_path):
    path = tmp_path / "c.yaml"
    classes = {"greedy": GreedySampler, "uniform": UniformSampler, "ucb1": UCB1Sampler,
               "map_elites": MapElitesSampler, "islands": IslandsSampler, "pareto": ParetoSampler,
               "latest": LatestSampler}
    assert set(sampler_names()) == set(classes)
    for name, cls in classes.items():
        path.write_text(f"search:\n  sampler: {name}\n")
        assert type(make_sampler(load_config(path, environ={}).search)) is cls
    path.write_text("search:\n  sampler: annealing\n")
    with pytest.raises(ConfigError, match="search.sampler .*unknown sampler 'annealing' .*greedy"):
        check_sampler(load_config(path, environ={}))  # checked when the run is built (plug-ins known)


def test_every_policy_is_a_parent_sampler_with_every_hook():
    hooks = ("select_parent", "select_parent_and_island", "on_node_added", "on_node_removed",
             "on_node_rescored", "replay_selection", "diverse_nodes", "get_state")
    for name in sampler_names():
        sampler = make_sampler(cfg(sampler=name))
        assert isinstance(sampler, ParentSampler)
        assert all(callable(getattr(sampler, hook)) for hook in hooks)
    with pytest.raises(TypeError, match="select_parent"):
        ParentSampler(cfg())  # type: ignore[abstract]


def test_a_policy_without_islands_gives_its_child_the_parents_island_and_random_diverse_nodes():
    pool, rng = Pool(), random.Random(0)
    sampler = make_sampler(cfg(exploitation=1.0, exploration=0.0))
    nodes = [node(f"h{i}", float(i), island=i % 2) for i in range(6)]
    add(pool, sampler, *nodes)
    parent, island = sampler.select_parent_and_island(pool, rng)
    assert parent.id == "h5" and island == 1
    diverse = sampler.diverse_nodes(parent, pool, rng, 3)
    assert len({n.id for n in diverse}) == 3 and parent not in diverse
    sampler.replay_selection(nodes[-1], pool)  # nothing to account for: no state changes
    assert sampler.get_state() == {"credit": {}}


def test_metric_features_need_a_range():
    with pytest.raises(ValueError, match="feature_ranges"):
        SearchConfig(map_elites_features=["combined_score"])
    assert SearchConfig(map_elites_features=["combined_score"],
                        feature_ranges={"combined_score": (0.0, 3.0)}).map_elites_features


# --- greedy / uniform ---------------------------------------------------------------------------

def test_greedy_exploits_the_best_and_explores_the_rest():
    pool, rng = Pool(), random.Random(0)
    nodes = [node(f"g{i}", float(i)) for i in range(20)]
    exploit = make_sampler(cfg(exploitation=1.0, exploration=0.0))
    add(pool, exploit, *nodes)
    assert {exploit.select_parent(pool, rng).id for _ in range(50)} == {"g19"}
    elite = make_sampler(cfg(exploitation=0.0, exploration=0.0, elite_size=3))
    assert {elite.select_parent(pool, rng).id for _ in range(200)} == {"g19", "g18", "g17"}
    explore = make_sampler(cfg(exploitation=0.0, exploration=1.0))
    assert len({explore.select_parent(pool, rng).id for _ in range(600)}) == 20


def test_uniform_picks_every_node_about_equally():
    pool, rng = Pool(), random.Random(1)
    sampler = make_sampler(cfg(sampler="uniform"))
    add(pool, sampler, *[node(f"u{i}", float(i)) for i in range(5)])
    counts = Counter(sampler.select_parent(pool, rng).id for _ in range(5000))
    assert len(counts) == 5 and min(counts.values()) > 850


# --- UCB1 ---------------------------------------------------------------------------------------

def test_ucb1_picks_an_unvisited_node_first_and_counts_visits():
    pool, rng = Pool(), random.Random(0)
    sampler = make_sampler(cfg(sampler="ucb1", ucb1_c=1.0))
    assert isinstance(sampler, UCB1Sampler)
    best = node("best", 10.0)
    add(pool, sampler, best)
    assert sampler.select_parent(pool, rng) is best
    assert sampler.visits(best) == 1 and sampler.total == 1
    worse = node("worse", 1.0, parent=best)
    add(pool, sampler, worse)
    assert sampler.select_parent(pool, rng) is worse  # unvisited beats a far better visited node
    assert sampler.visits(worse) == 1 and sampler.total == 2
    for _ in range(20):
        sampler.select_parent(pool, rng)
    assert sampler.visits(best) + sampler.visits(worse) == 22 == sampler.total
    assert sampler.visits(best) > sampler.visits(worse)  # the better arm is pulled more


def test_ucb1_value_is_normalised_score_plus_the_exploration_bonus():
    pool, rng = Pool(), random.Random(0)
    sampler = make_sampler(cfg(sampler="ucb1", ucb1_c=0.5))
    a, b, c = node("a", 0.0), node("b", 5.0), node("c", 10.0)
    add(pool, sampler, a, b, c)
    for _ in range(3):
        sampler.select_parent(pool, rng)  # each visited once: c, b, a (best unvisited first)
    visits = {"a": 1, "b": 1, "c": 1}
    for _ in range(12):
        total = sum(visits.values())
        value = {k: {"a": 0.0, "b": 0.5, "c": 1.0}[k] + 0.5 * math.sqrt(math.log(total) / v)
                 for k, v in visits.items()}
        expected = max(value, key=value.get)
        assert sampler.select_parent(pool, rng).id == expected
        visits[expected] += 1


def test_ucb1_with_descendant_credit_prefers_the_productive_lineage():
    pool, rng = Pool(), random.Random(0)
    plain = make_sampler(cfg(sampler="ucb1", ucb1_c=0.0))
    credited = make_sampler(cfg(sampler="ucb1", ucb1_c=0.0, credit_weight=5.0))
    root = node("root", 1.0)
    good = node("good", 3.0, parent=root)
    fertile = node("fertile", 2.0, parent=root)
    kid = node("kid", 2.5, parent=fertile)
    for sampler in (plain, credited):
        p = Pool()
        add(p, sampler, root, good, fertile, kid)
        for _ in range(4):
            sampler.select_parent(p, rng)
        pool = p
    assert plain.select_parent(pool, rng).id == "good"
    assert credited.select_parent(pool, rng).id == "root"  # its descendants improved the most


# --- descendant credit --------------------------------------------------------------------------

def test_descendant_credit_accumulates_up_the_lineage():
    pool, credit = Pool(), DescendantCredit(decay=0.5)
    a = node("a", 1.0)
    b = node("b", 2.0, parent=a)
    c = node("c", 2.5, parent=b)
    d = node("d", 0.5, parent=c)  # worse than its parent: no credit
    for n in (a, b, c, d):
        pool.add(n)
        credit.add(n, pool)
    assert credit.of(c) == 0.0
    assert credit.of(b) == pytest.approx(0.5)
    assert credit.of(a) == pytest.approx(1.0 + 0.5 * 0.5)
    credit.remove(c)
    assert credit.of(a) == pytest.approx(1.0) and credit.of(b) == 0.0


# --- MAP-Elites -------------------------------------------------------------------------------------

def test_map_elites_replaces_a_cell_only_with_a_better_occupant():
    pool = Pool()
    sampler = make_sampler(cfg(sampler="map_elites"))
    assert isinstance(sampler, MapElitesSampler)
    seed = node("seed", 1.0)
    first = node("first", 2.0, parent=seed, a=2.0)
    add(pool, sampler, seed, first)
    cell = sampler.cell_of(first)
    same_cell_worse = node("worse", 1.5, parent=seed, a=3.0)
    same_cell_equal = node("equal", 2.0, parent=seed, a=4.0)
    add(pool, sampler, same_cell_worse, same_cell_equal)
    assert sampler.cell_of(same_cell_worse) == sampler.cell_of(same_cell_equal) == cell
    assert sampler.elite[cell] is first
    better = node("better", 2.5, parent=seed, a=5.0)
    add(pool, sampler, better)
    assert sampler.cell_of(better) == cell and sampler.elite[cell] is better


def test_map_elites_grid_drives_selection():
    pool, rng = Pool(), random.Random(3)
    sampler = make_sampler(cfg(sampler="map_elites", map_elites_bins=4))
    seed = node("seed", 1.0)
    add(pool, sampler, seed)
    rows = []
    for i in range(40):  # programs of growing size and distance from the seed
        extra = " + ".join(f"math.cos({j} * i)" for j in range(i % 9))
        code = PROGRAM.format(a=1.0 + i, op="+", b=0.0).replace("total += ", f"total += {extra or '0'} + ")
        n = node(f"m{i}", random.Random(i).random(), parent=seed)
        n.code = code
        rows.append(n)
    add(pool, sampler, *rows)
    elites = {n.id for n in sampler.elite.values()}
    assert 3 <= len(sampler.cells) < len(rows)
    picked = Counter(sampler.select_parent(pool, rng).id for _ in range(2000))
    assert set(picked) <= elites  # never a node that holds no cell
    assert len(picked) == len(elites)  # and every cell gets its turn
    parent = rows[0]
    near = sampler.diverse_nodes(parent, pool, rng, 2)
    assert near and all(n.id in elites and n.id != parent.id for n in near)


def test_map_elites_on_a_task_metric():
    pool = Pool()
    sampler = make_sampler(cfg(sampler="map_elites", map_elites_features=["loss"],
                               feature_ranges={"loss": (0.0, 1.0)}, map_elites_bins=10))
    low, high = node("low", 1.0), node("high", 1.0)
    low.metrics, high.metrics = {"loss": 0.05}, {"loss": 0.95}
    add(pool, sampler, low, high)
    assert sampler.cell_of(low) == (0,) and sampler.cell_of(high) == (9,)


# --- islands --------------------------------------------------------------------------------------

def test_first_children_of_the_seed_spread_over_the_islands_and_then_stay_home():
    pool, rng = Pool(), random.Random(0)
    sampler = make_sampler(cfg(sampler="islands", islands=5, migration_interval=1000))
    seed = node("seed", 1.0)
    add(pool, sampler, seed)
    served = []
    for i in range(5):
        parent, island = sampler.select_parent_and_island(pool, rng)
        served.append(island)
        assert parent is seed
        add(pool, sampler, node(f"c{i}", 1.0 + i, parent=parent, island=island))
    assert served == [0, 1, 2, 3, 4]
    for i in range(50):
        parent, island = sampler.select_parent_and_island(pool, rng)
        assert sampler.island_of(parent) == island  # no migrants yet: the parent lives there
        add(pool, sampler, node(f"d{i}", rng.random(), parent=parent, island=island))
    by_island = Counter(n.island for n in pool.nodes)
    assert by_island == Counter({0: 12, 1: 11, 2: 11, 3: 11, 4: 11})


def test_migration_every_k_generations_at_the_rate_without_duplicates():
    pool = Pool()
    sampler = make_sampler(cfg(sampler="islands", islands=3, migration_interval=2, migration_rate=0.5))
    assert isinstance(sampler, IslandsSampler)
    seed = node("seed", 0.0)
    add(pool, sampler, seed)
    scores = iter([5.0, 1.0, 2.0, 3.0, 4.0])
    for i, island in enumerate([0, 0, 1, 1, 2]):  # arrivals 2..6; 6 = 2 generations of 3 islands
        assert not sampler.migrations
        add(pool, sampler, node(f"i{i}", next(scores), parent=seed, island=island))
    assert len(sampler.migrations) == 1 and sampler.migrations[0][0] == 6
    ids = [[n.id for n in isl.ranking] for isl in sampler.islands]
    # island 0 (i0=5, i1=1, seed=0) sends its best int(3*0.5)=1; island 1 (i3, i2) sends 1; island 2 (i4) 1
    assert ids[1] == ["i0", "i3", "i2"] and ids[2] == ["i4", "i3"] and ids[0] == ["i0", "i4", "i1", "seed"]
    for i in range(6):  # the next migration would send the same bests again: nothing is duplicated
        add(pool, sampler, node(f"j{i}", -1.0, parent=seed, island=i % 3))
    assert len(sampler.migrations) == 2
    for island in sampler.islands:
        assert len(island.ranking) == len(island.ids)
    assert ["i4" in isl for isl in sampler.islands] == [True, True, True]  # went round, once each


def test_a_migrant_parent_has_its_children_on_the_island_it_was_drawn_for():
    pool, rng = Pool(), random.Random(0)
    sampler = make_sampler(cfg(sampler="islands", islands=2, migration_interval=1, migration_rate=1.0,
                               exploitation=1.0, exploration=0.0))
    star = node("star", 9.0, island=0)
    other = node("other", 1.0, parent=star, island=1)
    add(pool, sampler, star, other)  # 2 arrivals = 1 generation: migration, star is now on island 1 too
    assert "star" in sampler.islands[1]
    picks = [sampler.select_parent_and_island(pool, rng) for _ in range(4)]
    assert [(p.id, i) for p, i in picks] == [("star", 0), ("star", 1), ("star", 0), ("star", 1)]


# --- rollback and resume, every policy --------------------------------------------------------------

def _policy_cfg(name: str) -> SearchConfig:
    return cfg(sampler=name, islands=3, migration_interval=2, migration_rate=0.5, credit_weight=1.0)


def _grow(sampler, pool: Pool, rng: random.Random, steps: int, prefix: str, all_nodes: list[Node],
          fail_every: int = 4) -> None:
    """A run in miniature: select, make a child on the chosen island, evaluate (some fail), commit."""
    for i in range(steps):
        parent, island = sampler.select_parent_and_island(pool, rng)
        failed = i % fail_every == fail_every - 1
        child = node(f"{prefix}{i}", parent.score_full + rng.gauss(0, 1), parent=parent, island=island,
                     a=rng.random(), status=FAILED if failed else EVALUATED)
        all_nodes.append(child)
        if not failed:
            add(pool, sampler, child)


@pytest.mark.parametrize("steps", [9, 13])  # 13: for islands, the speculative arrival triggers a migration
@pytest.mark.parametrize("policy", ["greedy", "uniform", "ucb1", "map_elites", "islands"])
def test_removing_a_node_restores_the_state_as_if_it_was_never_added(policy, steps):
    rng_a, rng_b = random.Random(5), random.Random(5)
    pool_a, pool_b = Pool(), Pool()
    a, b = make_sampler(_policy_cfg(policy)), make_sampler(_policy_cfg(policy))
    seed = node("seed", 0.0)
    add(pool_a, a, seed)
    add(pool_b, b, seed)
    _grow(a, pool_a, rng_a, steps, "n", [])
    _grow(b, pool_b, rng_b, steps, "n", [])
    parent = pool_a.best
    spec = node("spec", 50.0, parent=parent, a=0.123, status=SPECULATIVE)
    spec.score_partial = 50.0
    add(pool_a, a, spec)
    if policy == "islands":
        assert bool(a.migrations and a.migrations[-1][0] == len(a.arrivals)) == (steps == 13)
    pool_a.remove(spec)
    a.on_node_removed(spec, pool_a)
    assert a.get_state() == b.get_state()
    assert [n.id for n in pool_a.ranked()] == [n.id for n in pool_b.ranked()]


@pytest.mark.parametrize("policy", ["greedy", "uniform", "ucb1", "map_elites", "islands"])
def test_replaying_the_node_database_rebuilds_the_same_sampler(policy):
    rng = random.Random(11)
    pool = Pool()
    live = make_sampler(_policy_cfg(policy))
    seed = node("seed", 0.0)
    every = [seed]
    add(pool, live, seed)
    _grow(live, pool, rng, 40, "r", every)
    # resume: the pool rebuilt in evaluation order, the sampler replayed from all nodes
    rebuilt = Pool()
    for n in sorted(every, key=lambda n: n.evaluated_at or n.created_at):
        if n.status == EVALUATED:
            rebuilt.add(n)
    resumed = rebuild_sampler(_policy_cfg(policy), every, rebuilt)
    assert resumed.get_state() == live.get_state()
    rng_live, rng_resumed = random.Random(2), random.Random(2)
    assert [live.select_parent(pool, rng_live).id for _ in range(10)] == \
           [resumed.select_parent(rebuilt, rng_resumed).id for _ in range(10)]


# --- the pool's incremental ranking ---------------------------------------------------------------

def test_pool_ranking_follows_adds_removals_and_rescoring():
    rng = random.Random(4)
    pool = Pool()
    nodes = [node(f"p{i}", round(rng.uniform(0, 5), 1)) for i in range(200)]
    for n in nodes:
        pool.add(n)
    assert [n.id for n in pool.ranked()] == [n.id for n in sorted(nodes, key=pool.score, reverse=True)]
    assert pool.best is pool.ranked()[0] and pool.top(3) == pool.ranked()[:3]
    for n in nodes[::3]:
        pool.remove(n)
    left = [n for i, n in enumerate(nodes) if i % 3]
    assert [n.id for n in pool.ranked()] == [n.id for n in sorted(left, key=pool.score, reverse=True)]
    spec = node("spec", 0.0, status=SPECULATIVE)
    spec.score_partial = 99.0
    assert pool.add(spec) and pool.best is spec
    spec.status, spec.score_full = EVALUATED, -1.0  # confirmed on the full set: much lower
    assert pool.rescore(spec) and pool.best is not spec and pool.ranked()[-1] is spec
    assert pool.score_range() == (pool.score(spec), pool.score(pool.best))
    minimize = Pool(maximize=False)
    for n in nodes[:10]:
        minimize.add(n)
    assert minimize.best is min(nodes[:10], key=lambda n: n.score_full)


def test_ucb1_rollback_of_a_node_already_selected_forgets_its_visits():
    pool_a, pool_b, rng = Pool(), Pool(), random.Random(0)
    a, b = make_sampler(cfg(sampler="ucb1")), make_sampler(cfg(sampler="ucb1"))
    seed = node("seed", 1.0)
    add(pool_a, a, seed)
    add(pool_b, b, seed)
    a.select_parent(pool_a, rng)
    b.select_parent(pool_b, rng)
    spec = node("spec", 5.0, parent=seed, status=SPECULATIVE)
    spec.score_partial = 5.0
    add(pool_a, a, spec)
    assert a.select_parent(pool_a, rng) is spec and a.total == 2
    pool_a.remove(spec)
    a.on_node_removed(spec, pool_a)
    assert a.get_state() == b.get_state()


def test_the_sampling_bench_reports_percentiles_for_every_policy(capsys):
    parser = argparse.ArgumentParser(prog="evoforge")
    add_bench_parser(parser.add_subparsers(dest="command", required=True))
    assert run_bench(parser.parse_args(["bench", "sampling", "--nodes", "300", "--repeat", "20"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["nodes"] == 300 and set(out["policies"]) == set(sampler_names())
    for figures in out["policies"].values():
        assert figures["select_plus_add"]["p50_ms"] <= figures["select_plus_add"]["p95_ms"]
    assert run_bench(parser.parse_args(["bench", "sampling", "--policies", "annealing"])) == 2


def test_the_pareto_sampler_keeps_a_parent_that_alone_solves_a_case():
    """GEPA: a node with a lower mean but the only one to solve case v2 is drawn; a dominated one
    with a higher mean than that is not (selection does not chase the validation mean)."""
    pool, sampler = Pool(), make_sampler(cfg(sampler="pareto"))
    scores = {"broad": [1, 1, 1, 0], "niche": [0, 0, 0, 1], "close": [1, 1, 0.9, 0]}
    for name, values in scores.items():
        n = node(name, sum(values) / 4)
        n.case_scores = {f"v{i}": float(v) for i, v in enumerate(values)}
        add(pool, sampler, n)
    drawn = [sampler.select_parent(pool, random.Random(i)).id for i in range(400)]
    assert set(drawn) == {"broad", "niche"}  # close (mean 0.725 > niche's 0.25) is dominated by broad
    assert 0.1 < drawn.count("niche") / len(drawn) < 0.4  # weighted by cases won: 1 of 4
