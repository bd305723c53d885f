"""Promotion: who goes up, the pilot-vs-full comparison, and what the commit does with it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.population.pool import Pool
from evoforge.stages.promote import promotion_items
from evoforge.stages.promotion_data import PromotionData
from evoforge.stages.reports.leaderboard import leaderboard_md
from evoforge.stages.rounds.plan_data import PlanData
from evoforge.stages.rounds.promotion import PROMOTE, Promoted, promotion_candidates, spearman, summarize
from tests.head_fakes import make_head


def _node(i: int, pilot: float, full: float | None = None, **kw) -> Node:
    return Node(id=f"n{i}", run_id="r", code=f"x = {i}\n", status=EVALUATED, score_pilot=pilot,
                score_full=full, owned={"plan": PlanData(branch="B1"), **kw.pop("owned", {})}, **kw)


def test_spearman_on_known_rankings():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [10, 30, 20]) == pytest.approx(0.5)
    assert spearman([1, 2], [1, 2]) is None  # too few pairs
    assert spearman([1, 1, 1], [1, 2, 3]) is None  # a constant side


def test_candidates_are_the_top_pilot_nodes_not_yet_promoted():
    pool = Pool(maximize=True, level="pilot")
    for i, (pilot, full) in enumerate([(0.9, 0.8), (0.8, None), (0.7, None), (0.6, None)]):
        promoted = {PromotionData.owner: PromotionData(round=1)} if full is not None else {}
        pool.add(_node(i, pilot, full, owned=promoted))
    assert [n.id for n in promotion_candidates(pool, 2)] == ["n1", "n2"]
    assert pool.best.id == "n0" and pool.winner().id == "n0"  # winner: best at full


def test_a_pilot_leader_that_falls_at_full_is_exposed_as_noisy():
    nodes = [_node(0, 0.95, 0.70), _node(1, 0.90, 0.91), _node(2, 0.85, 0.90), _node(3, 0.80, 0.88)]
    results = [Promoted(n.id, n.score_pilot, n.score_full, None, 1.0, 1.0) for n in nodes]
    summary = summarize(1, results, nodes, maximize=True)
    assert summary.noisy == ("n0",)  # pilot rank 1, full rank 4
    assert set(summary.consistent) == {"n1", "n2", "n3"}
    assert summary.spearman == pytest.approx(spearman([0.95, 0.9, 0.85, 0.8], [0.7, 0.91, 0.9, 0.88]))
    assert summary.spearman < 0.5


def test_minimised_tasks_rank_the_other_way():
    nodes = [_node(0, 1.0, 1.0), _node(1, 2.0, 2.1), _node(2, 3.0, 3.2), _node(3, 4.0, 0.5)]
    results = [Promoted(n.id, n.score_pilot, n.score_full, None, 0.0, 0.0) for n in nodes]
    summary = summarize(2, results, nodes, maximize=False)
    assert summary.noisy == ()  # n3 rose, nobody fell more than one place
    assert summary.spearman == pytest.approx(spearman([1, 2, 3, 4], [1.0, 2.1, 3.2, 0.5]))


def _commit(head, items, results) -> list:
    """Each promotion item back at the head as the promote stage sends it (the given result)."""
    outcomes = []
    for item, result in zip(items, results, strict=True):
        item.owned = {PROMOTE: replace(item.owned[PROMOTE], result=result)}
        outcomes.append(head.finished(item))
    return outcomes


def test_the_head_folds_full_scores_in_and_moves_the_winner(tmp_path):
    rig = make_head(tmp_path, [_node(0, 0.95), _node(1, 0.90), _node(2, 0.85)], level="pilot")
    pool, stats = rig.state.pool, rig.state.stats
    nodes = [pool.get(f"n{i}") for i in range(3)]
    v, counted = pool.v, (stats.evaluations, stats.proposals, stats.evaluated_ok)
    results = [Promoted("n0", 0.95, 0.70, None, 2.0, 1.5), Promoted("n1", 0.90, 0.92, None, 2.0, 1.5),
               Promoted("n2", 0.85, None, "crashed at full", 1.0, 0.5)]
    items = promotion_items(nodes, 1, v)
    # out of order, as the stage's workers finish: the round is recorded with its last item only
    assert _commit(rig.head, [items[1], items[0]], [results[1], results[0]]) == [None, None]
    assert rig.state.rounds.promotions == [] and pool.get("n1").score_full == 0.92  # rescored in place
    _commit(rig.head, [items[2]], [results[2]])
    stored = rig.recorded()
    rig.close()
    assert [n.score_full for n in nodes] == [0.70, 0.92, None]
    assert all(PromotionData.peek(n).round == 1 for n in nodes)
    assert nodes[2].artifacts["promotion_error"] == "crashed at full"
    assert pool.winner().id == "n1" and pool.best.id == "n0"  # selection still ranks by pilot
    assert pool.v == v + 1  # the winner at full changed (once, for the round)
    assert rig.state.stats.promotions == 3 and rig.state.stats.eval_cpu_s == pytest.approx(3.5)
    assert (stats.evaluations, stats.proposals, stats.evaluated_ok) == counted  # no new evaluation
    summary = rig.state.rounds.promotions[-1]
    assert summary.round == 1 and summary.promoted == ("n0", "n1", "n2")  # in rank order
    assert (tmp_path / "best" / "program.py").read_text() == nodes[1].code
    assert stored["n1"].score_full == 0.92 and PromotionData.peek(stored["n1"]).round == 1
    board = leaderboard_md("t", pool, promotions=rig.state.rounds.promotions,
                           history=rig.state.history.updates)
    assert "ranked by the `pilot` score" in board
    assert "| 1 | `n0` | B1 | 0.95 | 0.7 |" in board
    assert "Winner so far: `n1`, full score 0.92 (pilot 0.9)" in board
    assert "| 1 | 3 |" in board and "new_winner" in board


def test_a_round_cut_by_a_kill_keeps_what_was_committed_and_the_resumed_run_promotes_the_rest(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rig = make_head(tmp_path / "a", [_node(0, 0.95), _node(1, 0.90)], level="pilot")
    pool = rig.state.pool
    items = promotion_items([pool.get("n0"), pool.get("n1")], 1, pool.v)
    _commit(rig.head, items[:1], [Promoted("n0", 0.95, 0.80, None, 2.0, 1.5)])  # then the kill
    stored = rig.recorded()
    rig.close()
    assert rig.state.rounds.promotions == []  # the round's summary waits for its last item
    assert stored["n0"].score_full == 0.80 and PromotionData.peek(stored["n0"]).round == 1

    again = make_head(tmp_path / "b", list(stored.values()), level="pilot")  # the resumed run
    state = again.state
    assert state.stats.promotions == 1 and state.pool.get("n0").score_full == 0.80
    rest = promotion_candidates(state.pool, 2)
    assert [n.id for n in rest] == ["n1"]  # what the round did not reach, promoted at the end
    _commit(again.head, promotion_items(rest, 1, state.pool.v), [Promoted("n1", 0.90, 0.85, None, 2.0, 1.5)])
    again.close()
    summary = state.rounds.promotions[-1]
    assert (summary.round, summary.promoted, state.stats.promotions) == (1, ("n1",), 2)
    assert state.pool.winner().id == "n1"  # judged over both full scores
