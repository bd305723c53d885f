"""What an analysis is worth when the LLM binds: which candidates the Analyzer still sends to the
LLM, in which order, and the deterministic summary the others get.

With slack (no call waiting for the scheduler's slots) every candidate is analysed by the LLM.
When the LLM binds, a candidate's worth decides: a new best is always analysed by the LLM (it
waits for a slot); then, in this order, the largest change from its parent (up or down, among the
largest fifth seen), a failure of a kind not seen before in the run, and the first candidate of a
plan branch or an island. Those wait as refusable calls (`analyze.max_waiting` at once, the
better-ranked first), within a ration of the candidates the binding LLM analyses
(`analyze.bound_share`); the rest, and those refused, get the deterministic summary (the offline analyzer's
mechanical report from the prompt's computed comparison), marked on the node (`AnalysisData.by`,
stages/analysis_data.py).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from evoforge.infra.nodes import EVALUATED, SPECULATIVE, Node
from evoforge.infra.offline.analysis import offline_analysis
from evoforge.infra.prompt_format import ANALYSIS_SECTIONS, parse_analysis
from evoforge.stages.analysis_prompt import error_class
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.rounds.plan_data import node_branch

SUMMARY_AUTHOR = "Deterministic summary (no LLM: the LLM was busy with more urgent calls)"
NEW_BEST, LARGE_CHANGE, NEW_FAILURE, FIRST_OF_GROUP = 0, 1, 2, 3  # worth kinds, most telling first
KIND_NAMES = {NEW_BEST: "new best", LARGE_CHANGE: "large change", NEW_FAILURE: "new failure kind",
              FIRST_OF_GROUP: "first of its branch or island"}
RATION = 0.02  # of the candidates seen while the LLM binds, the most analysed by it beyond new bests
_LARGE_QUANTILE = 0.8  # a change is large among the largest fifth of the changes seen so far
_MAX_CHANGES = 200  # the changes remembered for that quantile


@dataclass(frozen=True)
class Worth:
    """What a candidate can teach: its kind (None: nothing special) and how far it moved."""

    kind: int | None
    change: float = 0.0  # |score - parent's| relative to the parent's

    @property
    def rank(self) -> tuple[float, ...]:
        """Its place among waiting analyses: kind first, then the larger change."""
        return (float(self.kind if self.kind is not None else len(KIND_NAMES)), -self.change)

    @property
    def name(self) -> str:
        return KIND_NAMES.get(self.kind, "nothing new") if self.kind is not None else "nothing new"


class Triage:
    """The analyzer's memory of the run: failure kinds, branches and islands seen, the changes
    measured, and the ration of LLM analyses while the LLM binds."""

    def __init__(self, ration: float = RATION) -> None:
        self.ration = ration
        self._failures: set[str] = set()
        self._groups: set[tuple[str, str]] = set()
        self._changes: list[float] = []  # sorted
        self._best: float | None = None  # the best score judged a new best: in flight to the pool, or in it
        self.seen_binding = self.granted_binding = 0

    def worth(self, item: Item, ctx: RunView) -> Worth:
        """What the item's candidate can teach (and remember what it showed)."""
        node = item.node
        assert node is not None
        change = _change(node, item.parent, ctx)
        kind = error_class(node)
        new_failure = kind != "none" and kind not in self._failures
        self._failures.add(kind)
        branch = node_branch(node)
        groups = [("island", str(node.island))] + ([("branch", branch)] if branch else [])
        first = any(g not in self._groups for g in groups)
        self._groups.update(groups)
        large = change > 0 and self._is_large(change)
        if change > 0:
            bisect.insort(self._changes, change)
            if len(self._changes) > _MAX_CHANGES:
                self._changes.pop(len(self._changes) // 2)  # thin the middle: keep both tails
        if is_new_best(node, ctx, self._best):
            self._best = ctx.pool.value(node)
            return Worth(NEW_BEST, change)
        if large:
            return Worth(LARGE_CHANGE, change)
        if new_failure:
            return Worth(NEW_FAILURE, change)
        return Worth(FIRST_OF_GROUP if first else None, change)

    def admit(self, worth: Worth) -> bool:
        """Whether a candidate seen while the LLM binds goes to it: a new best always, another
        worth something within the ration (counted as granted), nothing else."""
        self.seen_binding += 1
        if worth.kind == NEW_BEST:
            return True
        if worth.kind is None or self.granted_binding >= self.ration * self.seen_binding:
            return False
        self.granted_binding += 1
        return True

    def refused(self) -> None:
        """An admitted candidate lost its place to better-ranked ones: its ration back."""
        self.granted_binding -= 1

    def _is_large(self, change: float) -> bool:
        if len(self._changes) < 5:
            return True  # too few seen to tell: every change counts as large
        cut = self._changes[min(len(self._changes) - 1, int(_LARGE_QUANTILE * len(self._changes)))]
        return change >= cut


def is_new_best(node: Node, ctx: RunView, in_flight: float | None = None) -> bool:
    """Whether the candidate beats the pool's best (fully evaluated) at the pool's level, and the
    `in_flight` score (of a new best analysed already, on its way to the pool: the pool grows in
    that order, so a candidate beaten by it will not be a new best when it is committed)."""
    if node.status not in (EVALUATED, SPECULATIVE) or node.error:
        return False
    value = ctx.pool.value(node)
    if value is None:
        return False
    best = ctx.pool.best_confirmed()
    best_value = ctx.pool.value(best) if best is not None else None
    beats_pool = best_value is None or ctx.task.better(value, best_value)
    return beats_pool and (in_flight is None or ctx.task.better(value, in_flight))


def _change(node: Node, parent: Node | None, ctx: RunView) -> float:
    """How far the candidate's score moved from its parent's, relative to it (0 when unknown)."""
    mine = _score(node)
    theirs = _score(parent) if parent is not None else None
    if mine is None or theirs is None:
        return 0.0
    return abs(mine - theirs) / max(abs(theirs), 1e-12)


def _score(node: Node) -> float | None:
    for value in (node.score_full, node.score_pilot, node.score_partial):
        if value is not None:
            return value
    return None


def summary_report(node: Node, prompt: str) -> str:
    """The deterministic summary of the candidate of the analysis `prompt`, as a report."""
    sections, _ = parse_analysis(offline_analysis(prompt, SUMMARY_AUTHOR))
    parts = [f"# Summary of node {node.id} (no LLM)",
             "_Written by the deterministic summary: the LLM was busy with more urgent calls, and "
             "this candidate was not among the most telling; computed from the facts in the prompt._", ""]
    for name in ANALYSIS_SECTIONS:
        if name != "Lessons":
            parts += [f"## {name}", sections.get(name, "").strip() or "_(none)_", ""]
    return "\n".join(parts)
