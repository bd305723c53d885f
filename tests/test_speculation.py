"""Speculative completion: prune on a losing prefix, release on a winning one, then confirm or
roll back at commit time, marking what was derived from a rolled-back node."""

from __future__ import annotations

from evoforge.evaluators.cases import CaseResult
from evoforge.infra.nodes import EVALUATED, ROLLED_BACK, SPECULATIVE, Node
from evoforge.stages.pool import Pool
from evoforge.stages.speculation import Reference, Speculation, confirmed

CASES = [str(i) for i in range(8)]


def _best(score: float = 0.5) -> Node:
    return Node(id="best", run_id="r", code="b", status=EVALUATED, score_full=score,
                case_scores={c: score for c in CASES})


def _feed(spec: Speculation, scores: list[float]) -> list[bool]:
    return [spec.on_case(CaseResult(CASES[i], i, s, {}, None)) for i, s in enumerate(scores)]


def _spec(pool: Pool, prune: bool = True) -> tuple[Speculation, list[int]]:
    released: list[int] = []
    return Speculation(alpha=0.25, total=8, prune=prune, reference=Reference.of(pool),
                       release=lambda partial, prefix: released.append(1)), released


def test_a_losing_prefix_stops_the_evaluation_after_alpha_of_the_cases():
    pool = Pool()
    pool.add(_best(0.5))
    spec, released = _spec(pool)
    answers = _feed(spec, [0.4, 0.45, 0.9])
    assert answers == [True, False, True]  # decided at 2 of 8 cases (alpha 0.25)
    assert spec.pruned and not released and abs(spec.partial - 0.425) < 1e-12


def test_a_losing_prefix_runs_on_when_pruning_is_off():
    pool = Pool()
    pool.add(_best(0.5))
    spec, released = _spec(pool, prune=False)
    assert _feed(spec, [0.4, 0.45, 0.9]) == [True, True, True]
    assert not spec.pruned and not released


def test_a_winning_prefix_is_released_once_and_the_evaluation_goes_on():
    pool = Pool()
    pool.add(_best(0.5))
    spec, released = _spec(pool)
    assert _feed(spec, [0.6, 0.7, 0.1, 0.1]) == [True] * 4
    assert released == [1] and spec.released_at is not None


def test_the_prefix_is_compared_on_the_same_cases():
    best = _best(0.5)
    best.case_scores = {c: (0.9 if c in ("0", "1") else 0.1) for c in CASES}
    pool = Pool()
    pool.add(best)
    reference = Reference.of(pool)
    assert reference.on(["0", "1"]) == 0.9
    assert reference.on(["0", "missing"]) == best.score_full


def test_confirmation_needs_the_full_score_to_beat_every_other_node():
    pool = Pool()
    pool.add(_best(0.5))
    node = Node(id="s", run_id="r", code="s", status=SPECULATIVE, score_partial=0.8)
    pool.add(node)
    assert pool.best is node  # in the pool on its prefix score
    node.status, node.score_full = EVALUATED, 0.55
    assert confirmed(node, pool)
    node.score_full = 0.45
    assert not confirmed(node, pool)


def test_removing_a_rolled_back_best_restores_the_previous_best_and_bumps_v():
    pool = Pool()
    best = _best(0.5)
    pool.add(best)
    node = Node(id="s", run_id="r", code="s", status=SPECULATIVE, score_partial=0.8)
    pool.add(node)
    v = pool.v
    node.status = ROLLED_BACK
    assert pool.remove(node) is True
    assert pool.best is best and pool.v == v + 1 and node not in pool.nodes


def _committer(tmp_path):
    from evoforge.infra.config import SearchConfig
    from evoforge.infra.nodestore import NodeStore
    from evoforge.infra.runfiles import RunPaths
    from evoforge.stages.commit import Committer
    from evoforge.stages.history import PoolHistory
    from evoforge.stages.sample import make_sampler
    from evoforge.stages.stats import RunStats

    pool = Pool()
    best = _best(0.5)
    pool.add(best)
    store = NodeStore(tmp_path / "nodes.duckdb")
    committer = Committer(store, RunPaths(tmp_path), pool, make_sampler(SearchConfig()), RunStats(),
                          "t", history=PoolHistory())
    return committer, pool, best, store


def _released_item(pool: Pool):
    """An item under evaluation, and the speculative snapshot of its node the engineer releases."""
    from evoforge.stages.item import Item

    node = Node(id="spec", run_id="r", code="s")
    snapshot = node.copy(status=SPECULATIVE, score_partial=0.8, speculative_at=1.0)
    return Item(v_i=pool.v, parent=pool.best, node=node), snapshot


def _finished(item, score: float) -> None:
    """The engineer's final result for the item, applied as the engine does."""
    item.apply(item.node.copy(status=EVALUATED, score_full=score, evaluated_at=2.0, speculative_at=1.0,
                              score_partial=0.8), {})


def test_commit_confirms_a_speculation_whose_full_score_holds(tmp_path):
    committer, pool, best, store = _committer(tmp_path)
    item, snapshot = _released_item(pool)
    assert committer.record_speculative(item, snapshot) is True
    assert snapshot.status == SPECULATIVE and pool.best is snapshot
    _finished(item, 0.6)
    assert committer.record_result(item) is None  # stays the best: no further version bump
    assert store.get("spec") is None  # buffered until the group commit
    committer.flush()
    assert pool.best is snapshot and snapshot.status == EVALUATED  # the member got the result
    assert item.node is snapshot and store.get("spec").status == EVALUATED
    assert committer.stats.confirmed == 1 and committer.history.updates[-1].kind == "speculative_best"


def test_commit_rolls_back_a_speculation_the_full_evaluation_disagrees_with(tmp_path):
    from evoforge.stages.item import Item
    from evoforge.stages.speculation import taint_derived

    committer, pool, best, store = _committer(tmp_path)
    item, snapshot = _released_item(pool)
    committer.record_speculative(item, snapshot)
    v_released = pool.v
    child = Item(v_i=pool.v, parent=snapshot)  # designed on the speculative node
    other = Item(v_i=pool.v, parent=best)
    _finished(item, 0.4)
    assert committer.record_result(item) == "rollback"
    committer.flush()
    assert item.node.status == ROLLED_BACK and item.node not in pool.nodes
    assert pool.best is best and pool.v == v_released + 1
    assert store.get("spec").status == ROLLED_BACK and "rolled back" in store.get("spec").reflection
    assert taint_derived([child, other, item], "spec", committer.lineage) == [child]
    assert child.tainted_by == "spec" and other.tainted_by is None
    stats = committer.stats
    assert stats.rolled_back == 1 and stats.wasted_eval_s == item.node.eval_s


def test_a_release_that_arrives_after_the_full_result_is_void(tmp_path):
    committer, pool, best, store = _committer(tmp_path)
    item, snapshot = _released_item(pool)
    _finished(item, 0.45)
    assert committer.record_speculative(item, snapshot) is False
    assert item.node.status == EVALUATED and item.node.speculative_at is None
    assert committer.record_result(item) is None  # an ordinary result, not a rollback
    assert item.node.status == EVALUATED and item.node in pool.nodes and pool.best is best
