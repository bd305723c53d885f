"""`evoforge status` explains where every evaluation and proposal went."""

from __future__ import annotations

from evoforge.flows.commands import status_text


def _status(**kw):
    base = {"task": "t", "run_id": "r", "state": "finished", "backend": "offline", "model": "m",
            "evaluations": 40, "max_evals": 40, "nodes_evaluated": 7, "nodes_failed": 2,
            "failed_research": 1, "duplicates_rejected": 1, "dropped_stale": 2, "pruned": 28,
            "rolled_back": 5, "best_score": 0.96, "best_node": "n", "candidates_per_min": 57.4,
            "wall_s": 41.8, "tokens_in": 10, "tokens_out": 5, "stop_reason": "max_evals reached (40)"}
    base.update(kw)
    return base


def test_evaluations_add_up_to_accepted_failed_pruned_and_rolled_back():
    line = status_text(_status()).splitlines()[2]
    assert line.startswith("evaluations   40 / 40")
    assert "7 accepted, 0 failed, 28 pruned, 5 rolled back; 4 rejected before evaluation" in line


def test_a_plain_run_does_not_mention_speculation():
    line = status_text(_status(pruned=0, rolled_back=0, dropped_stale=0, nodes_evaluated=30)).splitlines()[2]
    assert "30 accepted, 10 failed; 2 rejected before evaluation)" in line and "pruned" not in line
