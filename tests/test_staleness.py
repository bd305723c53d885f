"""Each staleness policy's decisions, and the cheap similarity check before reflection."""

from __future__ import annotations

from evoforge.infra.config import StalenessConfig
from evoforge.infra.nodes import Node
from evoforge.stages.population.history import NEW_BEST, PoolHistory
from evoforge.stages.population.item import Item
from evoforge.stages.population.staleness import DROP, PASS, REFLECT, change_similarity, decide

RADIUS_DIFF = "--- parent\n+++ candidate\n-    r = 0.45\n+    r = 0.47\n"
ANGLE_DIFF = "--- parent\n+++ candidate\n-    angle = 0.1 * k\n+    angle = 0.12 * k\n"


def _item(v_i: int, diff: str = RADIUS_DIFF, tainted: str | None = None) -> Item:
    parent = Node(id="p", run_id="r", code="x", score_full=1.0)
    item = Item(v_i=v_i, parent=parent, tainted_by=tainted)
    item.node = Node(id="c", run_id="r", code="y", diff=diff)
    return item


def _history(*diffs: str) -> PoolHistory:
    history = PoolHistory()
    for v, diff in enumerate(diffs, start=1):
        history.record(v, NEW_BEST, Node(id=f"b{v}", run_id="r", code="", diff=diff, score_full=1.0 + v))
    return history


def test_full_passes_everything_even_very_stale_or_tainted():
    cfg = StalenessConfig(policy="full")
    assert decide(_item(0), 9, _history(), cfg).action == PASS
    assert decide(_item(0, tainted="x"), 9, _history(), cfg).action == PASS


def test_guarded_drops_only_past_max_staleness():
    cfg = StalenessConfig(policy="guarded", max_staleness=2)
    assert decide(_item(3), 5, _history(), cfg).action == PASS  # staleness 2
    dropped = decide(_item(2), 5, _history(), cfg)  # staleness 3
    assert dropped.action == DROP and "3 > 2" in dropped.reason


def test_guarded_drops_items_derived_from_a_rolled_back_node():
    cfg = StalenessConfig(policy="guarded", max_staleness=5)
    decision = decide(_item(4, tainted="spec1"), 4, _history(), cfg)
    assert decision.action == DROP and "spec1" in decision.reason


def test_reflective_passes_fresh_items_without_a_check():
    cfg = StalenessConfig(policy="reflective")
    assert decide(_item(2), 2, _history(RADIUS_DIFF, RADIUS_DIFF), cfg).action == PASS


def test_reflective_lets_an_unaffected_item_pass_without_reflection():
    cfg = StalenessConfig(policy="reflective", similarity_threshold=0.3)
    decision = decide(_item(0, diff=ANGLE_DIFF), 1, _history(RADIUS_DIFF), cfg)
    assert decision.action == PASS and "unaffected" in decision.reason


def test_reflective_reflects_when_the_pool_changed_the_same_thing():
    cfg = StalenessConfig(policy="reflective", similarity_threshold=0.3)
    decision = decide(_item(0, diff=RADIUS_DIFF), 1, _history(RADIUS_DIFF), cfg)
    assert decision.action == REFLECT


def test_reflective_only_compares_with_updates_after_the_items_version():
    cfg = StalenessConfig(policy="reflective", similarity_threshold=0.3)
    history = _history(RADIUS_DIFF, ANGLE_DIFF)  # v1 changed the radius, v2 the angle
    assert decide(_item(1, diff=RADIUS_DIFF), 2, history, cfg).action == PASS
    assert decide(_item(0, diff=RADIUS_DIFF), 2, history, cfg).action == REFLECT


def test_reflective_always_reflects_a_tainted_item():
    cfg = StalenessConfig(policy="reflective", similarity_threshold=0.99)
    assert decide(_item(3, diff=ANGLE_DIFF, tainted="s"), 3, _history(), cfg).action == REFLECT


def test_similarity_is_token_jaccard_of_changed_lines():
    assert change_similarity(RADIUS_DIFF, [RADIUS_DIFF]) == 1.0
    assert change_similarity(RADIUS_DIFF, []) == 0.0
    assert 0 < change_similarity(RADIUS_DIFF, [ANGLE_DIFF]) < 0.5
