"""Staleness policies (FlashEvolve): what to do with an item designed against an older pool.

`full` passes everything; `guarded` drops items more than `max_staleness` versions old;
`reflective` first runs a cheap similarity check between what the item changes and what changed
in the pool since the item's version, passes clearly unaffected items, and sends the rest to
the reflect stage. An item whose parent was rolled back counts as stale under every policy but
`full`, and skips the similarity check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evoforge.infra.config import StalenessConfig
from evoforge.stages.population.history import PoolHistory
from evoforge.stages.population.item import Item

PASS, DROP, REFLECT = "pass", "drop", "reflect"

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+\.?\d*(?:[eE][-+]?\d+)?|[^\sA-Za-z_0-9]")


@dataclass(frozen=True)
class Decision:
    """The policy's verdict on one item, with the reason recorded on its node."""

    action: str
    reason: str


def changed_tokens(diff: str) -> set[str]:
    """Tokens of the lines a unified diff adds or removes."""
    tokens: set[str] = set()
    for line in diff.splitlines():
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---")):
            tokens.update(_TOKEN.findall(line[1:]))
    return tokens


def change_similarity(item_diff: str, pool_diffs: list[str]) -> float:
    """Largest Jaccard similarity between the item's changed tokens and any pool change's."""
    mine = changed_tokens(item_diff)
    if not mine:
        return 0.0
    best = 0.0
    for diff in pool_diffs:
        theirs = changed_tokens(diff)
        if theirs:
            best = max(best, len(mine & theirs) / len(mine | theirs))
    return best


def decide(item: Item, v: int, history: PoolHistory, cfg: StalenessConfig) -> Decision:
    """Apply the configured policy to `item` at pool version `v`."""
    gap = item.staleness(v)
    tainted = item.tainted_by is not None
    if cfg.policy == "full" or (gap <= 0 and not tainted):
        return Decision(PASS, f"{cfg.policy}: passed (staleness {gap})")
    if cfg.policy == "guarded":
        if tainted:
            return Decision(DROP, f"guarded: dropped (parent {item.tainted_by} was rolled back)")
        if gap > cfg.max_staleness:
            return Decision(DROP, f"guarded: dropped (staleness {gap} > {cfg.max_staleness})")
        return Decision(PASS, f"guarded: passed (staleness {gap} <= {cfg.max_staleness})")
    if tainted:
        return Decision(REFLECT, f"reflective: parent {item.tainted_by} was rolled back")
    assert item.node is not None
    updates = history.since(item.v_i)
    similarity = change_similarity(item.node.diff, [u.node.diff for u in updates])
    if similarity < cfg.similarity_threshold:
        return Decision(PASS, f"reflective: unaffected (staleness {gap}, similarity {similarity:.2f} "
                              f"< {cfg.similarity_threshold})")
    return Decision(REFLECT, f"reflective: staleness {gap}, similarity {similarity:.2f}")
