"""The novelty check before evaluation: repeats are the same evaluation (served, stages/population/repeats.py)
and, optionally, near-duplicates of pool programs are rejected."""

from __future__ import annotations

from evoforge.infra.config import SearchConfig
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.stages.population.novelty import MinHashJaccard, novelty_rejection, similarity_index
from evoforge.stages.population.pool import Pool, normalized_code
from evoforge.stages.population.repeats import EvalKey, RepeatMemo

BASE = '''import numpy as np

# EVOLVE-BLOCK-START
def construct(n):
    """Place n points on a ring."""
    pts = []
    for k in range(n):
        angle = 2.0 * np.pi * k / n
        pts.append([0.5 + 0.3 * np.cos(angle), 0.5 + 0.3 * np.sin(angle)])
    return np.array(pts)
# EVOLVE-BLOCK-END
'''

DIFFERENT = '''import numpy as np

# EVOLVE-BLOCK-START
def construct(n):
    grid = int(np.ceil(np.sqrt(n)))
    xs, ys = np.meshgrid(np.linspace(0.1, 0.9, grid), np.linspace(0.1, 0.9, grid))
    return np.stack([xs.ravel(), ys.ravel()], axis=1)[:n]
# EVOLVE-BLOCK-END
'''


def pool_with(*codes: str) -> Pool:
    pool = Pool()
    for i, code in enumerate(codes):
        pool.add(Node(id=f"n{i}", run_id="t", code=code, score_full=float(i), status=EVALUATED,
                      evaluated_at=float(i)))
    return pool


def memo_with(code: str) -> RepeatMemo:
    memo = RepeatMemo()
    memo.finish(EvalKey.of(code, "full", {}), pool_with(code).nodes[0], "full")
    return memo


def test_an_exact_duplicate_is_served_the_earlier_result_naming_the_node():
    recorded = memo_with(BASE).recorded(EvalKey.of(BASE, "full", {}))
    assert recorded is not None and recorded.node_id == "n0" and recorded.score == 0.0


def test_a_duplicate_up_to_comments_and_spacing_is_the_same_evaluation():
    noisy = BASE.replace("pts = []", "pts = [ ]   # the points").replace(
        "angle = 2.0 * np.pi * k / n", "angle=2.0*np.pi*k/n\n\n")
    assert noisy != BASE
    recorded = memo_with(BASE).recorded(EvalKey.of(noisy, "full", {}))
    assert recorded is not None and recorded.node_id == "n0"


def test_changes_that_matter_are_not_normalised_away():
    assert normalized_code('s = "a  b"\n') != normalized_code('s = "a b"\n')  # string contents
    indented, dedented = "if x:\n    a()\n    b()\n", "if x:\n    a()\nb()\n"
    assert normalized_code(indented) != normalized_code(dedented)  # indentation
    moved = BASE.replace("0.3 * np.cos", "0.31 * np.cos")
    assert memo_with(BASE).recorded(EvalKey.of(moved, "full", {})) is None
    assert novelty_rejection(moved, pool_with(BASE), SearchConfig()) is None


def test_similarity_threshold_rejects_near_duplicates_only_when_set():
    near = BASE.replace("0.3 * np.sin", "0.31 * np.sin")
    pool = pool_with(BASE)
    assert novelty_rejection(near, pool, SearchConfig()) is None  # off by default
    strict = SearchConfig(novelty_threshold=0.8)
    reason = novelty_rejection(near, pool, strict)
    assert reason is not None and reason.startswith("too similar to node n0: minhash-jaccard")
    assert novelty_rejection(DIFFERENT, pool, strict) is None


def test_minhash_estimates_jaccard_and_the_index_follows_the_pool():
    sim = MinHashJaccard()
    a, b = sim.vector(BASE), sim.vector(DIFFERENT)
    assert sim.similarities(a[None, :], a)[0] == 1.0
    assert sim.similarities(a[None, :], b)[0] < 0.3
    pool = pool_with(BASE, DIFFERENT)
    index = similarity_index(pool)
    assert similarity_index(pool) is index and index.ids == ["n0", "n1"]
    pool.remove(pool.nodes[0])
    assert index.ids == ["n1"]
    score, node_id = index.nearest(BASE)
    assert node_id == "n1" and score < 0.3
