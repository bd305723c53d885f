"""Speculative completion: prune on a losing prefix, release on a winning one, then confirm or
roll back at commit time, marking what was derived from a rolled-back node."""

from __future__ import annotations

import pytest

from evoforge.evaluators.cases import CaseResult
from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, ROLLED_BACK, SPECULATIVE, Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.speculation import Reference, Speculation, confirmed
from evoforge.stages.population.staleness_data import StalenessData

CASES = [str(i) for i in range(8)]


def _best(score: float = 0.5) -> Node:
    return Node(id="best", run_id="r", code="b", status=EVALUATED, score_full=score,
                case_scores={c: score for c in CASES})


def _feed(spec: Speculation, scores: list[float], start: int = 0) -> list[bool]:
    return [spec.on_case(CaseResult(CASES[i], i, s, {}, None)) for i, s in enumerate(scores, start)]


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
    assert _feed(spec, [0.6, 0.7, 0.4, 0.4, 0.6, 0.6, 0.1, 0.1]) == [True] * 8
    assert released == [1] and spec.released_at is not None and not spec.pruned
    assert spec.partial == pytest.approx(0.65)  # the prefix's score, not the later checkpoints'


def test_a_released_candidate_that_falls_behind_is_stopped_at_the_next_checkpoint():
    pool = Pool()
    pool.add(_best(0.5))
    spec, released = _spec(pool)
    answers = _feed(spec, [0.6, 0.7, 0.1, 0.1, 0.9])
    assert answers == [True, True, True, False, True]  # 4 cases: mean 0.375 < 0.5, stopped there
    assert released == [1] and spec.pruned and spec.partial == pytest.approx(0.65)


def test_a_node_confirmed_while_a_candidate_runs_raises_the_bar_at_the_next_checkpoint():
    pool = Pool()
    pool.add(_best(0.5))
    spec, released = _spec(pool)
    assert _feed(spec, [0.6, 0.6]) == [True, True] and released == [1]  # beats 0.5: released
    better = _best(0.7)
    better.id = "better"
    pool.add(better)  # confirmed meanwhile: the candidate would be rolled back at the end
    assert _feed(spec, [0.6, 0.6], start=2) == [True, False]  # 4 cases: 0.6 < 0.7, stopped
    assert spec.pruned and spec.reference.node_id == "best"  # the dispatch snapshot is kept


def test_a_reference_sent_to_another_process_is_the_snapshot_without_the_pool():
    import pickle

    pool = Pool()
    pool.add(_best(0.5))
    reference = Reference.of(pool)
    copy = pickle.loads(pickle.dumps(reference))
    assert reference.pool is pool and copy.pool is None
    assert (copy.node_id, copy.score, dict(copy.case_scores)) == ("best", 0.5, dict(reference.case_scores))
    pool.add(Node(id="better", run_id="r", code="c", status=EVALUATED, score_full=0.9))
    assert reference.now().node_id == "better" and copy.now() is copy


def test_the_last_case_is_left_to_the_full_evaluation():
    pool = Pool()
    pool.add(_best(0.5))
    spec, released = _spec(pool)
    assert _feed(spec, [0.9, 0.9, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0]) == [True] * 8
    assert released == [1] and not spec.pruned  # losing at 8 of 8 is the commit's rollback


def test_a_candidate_tying_the_best_in_another_case_order_does_not_beat_it():
    cases = ["a", "b", "c"]
    best = Node(id="best", run_id="r", code="b", status=EVALUATED, score_full=0.2,
                case_scores={"a": 0.1, "b": 0.2, "c": 0.3})
    pool = Pool()
    pool.add(best)
    tie = {"c": 0.3, "b": 0.2, "a": 0.1}  # the same scores, run in the reverse order
    assert sum(tie.values()) != sum(best.case_scores.values())  # a plain sum differs by rounding
    spec = Speculation(alpha=1.0, total=3, prune=True, reference=Reference.of(pool))
    answers = [spec.on_case(CaseResult(c, i, tie[c], {}, None)) for i, c in enumerate(tie)]
    assert answers == [True, True, False] and spec.pruned
    assert spec.partial == Reference.of(pool).on(cases)  # the same mean in either order


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


def _rig(tmp_path, policy: str = "full"):
    from evoforge.infra.config import RunConfig
    from tests.head_fakes import make_head

    rig = make_head(tmp_path, [_best(0.5)], RunConfig.model_validate({"staleness": {"policy": policy}}))
    return rig, rig.state.pool, rig.state.pool.get("best")


def _released_item(pool: Pool, node_id: str = "spec", parent: Node | None = None):
    """An item under evaluation, and the speculative snapshot of its node the engineer releases."""
    from evoforge.stages.population.item import Item

    parent = parent or pool.best
    node = Node(id=node_id, run_id="r", code=node_id, parent_id=parent.id)
    snapshot = node.copy(status=SPECULATIVE, score_partial=0.8, speculative_at=1.0)
    return Item(v_i=pool.v, parent=parent, node=node), snapshot


def _finished(item, score: float | None, status=EVALUATED) -> None:
    """The engineer's final result for the item, applied as the engine does."""
    item.apply(item.node.copy(status=status, score_full=score, evaluated_at=2.0, speculative_at=1.0,
                              score_partial=0.8, eval_s=1.5))


def test_the_head_confirms_a_speculation_whose_full_score_holds(tmp_path):
    rig, pool, best = _rig(tmp_path)
    item, snapshot = _released_item(pool)
    assert rig.head.released(item, snapshot) is True
    assert snapshot.status == SPECULATIVE and pool.best is snapshot
    _finished(item, 0.6)
    assert rig.head.finished(item) is None  # stays the best: no further version bump
    stored = rig.recorded()
    rig.close()
    assert pool.best is snapshot and snapshot.status == EVALUATED  # the member got the result
    assert item.node is snapshot and stored["spec"].status == EVALUATED
    assert rig.state.stats.confirmed == 1 and rig.state.history.updates[-1].kind == "speculative_best"


def test_the_head_rolls_back_a_speculation_the_full_evaluation_disagrees_with(tmp_path):
    from evoforge.stages.population.item import Item
    from evoforge.stages.population.speculation import taint_derived

    rig, pool, best = _rig(tmp_path)
    item, snapshot = _released_item(pool)
    rig.head.released(item, snapshot)
    v_released = pool.v
    child = Item(v_i=pool.v, parent=snapshot)  # designed on the speculative node
    other = Item(v_i=pool.v, parent=best)
    _finished(item, 0.4)
    assert rig.head.finished(item) == "rollback"
    stored = rig.recorded()
    rig.close()
    assert item.node.status == ROLLED_BACK and item.node not in pool.nodes
    assert pool.best is best and pool.v == v_released + 1
    assert stored["spec"].status == ROLLED_BACK and "rolled back" in StalenessData.peek(stored["spec"]).note
    assert taint_derived([child, other, item], "spec", rig.state.lineage) == [child]
    assert child.tainted_by == "spec" and other.tainted_by is None
    stats = rig.state.stats
    assert stats.rolled_back == 1 and stats.wasted_eval_s == 1.5 == item.node.eval_s


def test_a_release_that_arrives_after_the_full_result_is_void(tmp_path):
    rig, pool, best = _rig(tmp_path)
    item, snapshot = _released_item(pool)
    _finished(item, 0.45)
    assert rig.head.released(item, snapshot) is False
    assert item.node.status == EVALUATED and item.node.speculative_at is None
    assert rig.head.finished(item) is None  # an ordinary result, not a rollback
    rig.close()
    assert item.node.status == EVALUATED and item.node in pool.nodes and pool.best is best


def test_a_released_node_whose_evaluation_crashes_ends_failed_not_rolled_back(tmp_path):
    rig, pool, best = _rig(tmp_path)
    item, snapshot = _released_item(pool)
    rig.head.released(item, snapshot)
    _finished(item, None, status=FAILED)
    assert rig.head.evaluated(item) == "rollback"  # out of the pool at once; derived items marked
    assert pool.get("spec") is None and pool.best is best
    rig.head.finished(item)
    stored = rig.recorded()
    rig.close()
    assert stored["spec"].status == FAILED and rig.state.stats.rolled_back == 0
    assert rig.state.stats.failed == 1


def test_release_crash_repair_release_leaves_one_pool_entry(tmp_path):
    rig, pool, best = _rig(tmp_path)
    item, snapshot = _released_item(pool)
    rig.head.released(item, snapshot)
    _finished(item, None, status=FAILED)
    rig.head.evaluated(item)  # the crash: the release is withdrawn
    item.apply(item.node.copy(status=PROPOSED, score_full=None, evaluated_at=None, speculative_at=None))
    again = item.node.copy(status=SPECULATIVE, score_partial=0.85, speculative_at=3.0)
    assert rig.head.released(item, again) is True  # the repaired code's prefix beats the best
    assert rig.head.released(item, again.copy()) is False  # a second release of it is void
    assert [n.id for n in pool.nodes].count("spec") == 1
    _finished(item, 0.7)
    assert rig.head.finished(item) is None and pool.best.id == "spec" and pool.best.status == EVALUATED
    rig.close()
    assert [n.id for n in pool.nodes].count("spec") == 1 and len(pool.nodes) == 2


@pytest.mark.parametrize(("policy", "kept"), [("full", True), ("reflective", True), ("guarded", False)])
def test_a_rollback_reranks_or_drops_the_descendants_in_the_pool_as_the_policy_says(tmp_path, policy, kept):
    from evoforge.infra.nodes import STALE

    rig, pool, best = _rig(tmp_path, policy)
    item, snapshot = _released_item(pool)
    rig.head.released(item, snapshot)
    child_item, child_snapshot = _released_item(pool, "child", parent=snapshot)  # designed on the release
    child_item.apply(child_item.node.copy(status=EVALUATED, score_full=0.9, evaluated_at=1.5))
    rig.head.finished(child_item)  # fully evaluated: a pool member descending from the release
    assert pool.get("child") is not None
    _finished(item, 0.4)
    assert rig.head.finished(item) == "rollback"
    stored = rig.recorded()
    rig.close()
    child = stored["child"]
    if kept:  # its own full evaluation stands: kept, re-ranked without the ancestor
        assert pool.get("child") is not None and pool.best.id == "child" and child.status == EVALUATED
        note = StalenessData.peek(child).note
        assert f"{policy}: kept in the pool, re-ranked (ancestor spec was rolled back)" in note
        assert rig.state.stats.dropped_stale == 0
    else:  # guarded: what was built on a rolled-back node leaves the pool
        assert pool.get("child") is None and pool.best is best and child.status == STALE
        note = StalenessData.peek(child).note
        assert "guarded: dropped from the pool (ancestor spec was rolled back)" in note
        assert rig.state.stats.dropped_stale == 1 and rig.state.stats.evaluated_ok == 1  # the seed
