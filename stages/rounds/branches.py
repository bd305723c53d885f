"""The plan agent's data: hypothesis branches held in slots, their health, and the plan's markdown.

A plan has a fixed number of slots, each holding one branch (a hypothesis the search pursues).
Health is derived from the nodes every time, never stored; a branch whose health breaks its kill
criteria is retired by the rules here, whatever an LLM says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import mean

from evoforge.infra.nodes import FAILED, Node
from evoforge.stages.rounds.plan_data import node_branch
from evoforge.stages.tuning.param_study import TuningData

GENERIC_HYPOTHESES = (
    "improve the model family",
    "improve preprocessing / features",
    "improve regularisation and ensembling",
)
ORIGINS = ("llm", "offline", "seed")
ACTIONS = ("keep", "refresh", "retire")
INITIAL_AUTHOR = "offline (no LLM): initial plan from the seed and generic hypotheses"


@dataclass(frozen=True)
class KillCriteria:
    """When a branch loses its slot: too long without improving, or too many failed candidates."""

    stall_rounds: int  # rounds without improving the branch's best
    max_invalid_rate: float  # share of the branch's candidates that failed
    min_candidates: int  # no kill before this many candidates

    def describe(self) -> str:
        """One line, e.g. 'stall_rounds=3, invalid_rate>0.5, min_candidates=4'."""
        return (f"stall_rounds={self.stall_rounds}, invalid_rate>{self.max_invalid_rate:g}, "
                f"min_candidates={self.min_candidates}")


@dataclass(frozen=True)
class Branch:
    """One hypothesis the search pursues, in one slot of the plan."""

    id: str  # "B1", "B2", ...: never reused
    slot: int
    hypothesis: str
    kill: KillCriteria
    born_round: int
    origin: str  # llm | offline | seed


@dataclass(frozen=True)
class SlotDecision:
    """What one re-planning did to one slot, and why."""

    slot: int
    branch_id: str  # the branch that held the slot before the decision
    action: str  # keep | refresh | retire
    reason: str
    new_branch_id: str | None = None  # the branch a retire put in the slot


@dataclass(frozen=True)
class Plan:
    """One version of the research plan: the branches in their slots and how it got here."""

    version: int
    round: int
    slots: tuple[Branch, ...]
    retired: tuple[tuple[Branch, str], ...]  # every branch retired so far, with why
    decisions: tuple[SlotDecision, ...]  # of this version
    author: str
    notes: str = ""


@dataclass(frozen=True)
class BranchHealth:
    """How a branch is doing, derived from its nodes at the search level."""

    branch_id: str
    candidates: int  # finished candidates (terminal status)
    evaluated: int  # of those, the ones with a search-level score
    failed: int
    invalid_rate: float
    best: float | None
    best_node_id: str | None
    rounds_since_improvement: int
    trial_spread: float | None  # mean of the nodes' saturation spread
    saturated_share: float | None  # share of nodes whose Optuna study stopped improving
    killed: bool
    kill_reason: str | None


def initial_plan(task_description: str, slots: int, kill: KillCriteria, seeds: Sequence[str]) -> Plan:
    """Version 1 at round 0: one branch per slot, from the seed texts, then generic hypotheses.

    >>> plan = initial_plan("", 2, KillCriteria(3, 0.5, 4), ["try gradient boosting"])
    >>> [(b.id, b.hypothesis, b.origin) for b in plan.slots]
    [('B1', 'try gradient boosting', 'seed'), ('B2', 'improve the model family', 'offline')]
    """
    if slots < 1:
        raise ValueError(f"a plan needs at least one slot, not {slots}")
    texts = [(" ".join(s.split()), "seed") for s in seeds if s.strip()]
    for i in range(max(0, slots - len(texts))):
        generic = GENERIC_HYPOTHESES[i % len(GENERIC_HYPOTHESES)]
        lap = i // len(GENERIC_HYPOTHESES)
        texts.append((generic if lap == 0 else f"{generic} (variant {lap + 1})", "offline"))
    branches = tuple(Branch(f"B{n}", n, text, kill, 0, origin)
                     for n, (text, origin) in enumerate(texts[:slots], 1))
    about = " ".join(task_description.split())[:200]
    return Plan(1, 0, branches, (), (), INITIAL_AUTHOR, f"Task: {about}" if about else "")


def branch_health(plan: Plan, nodes: Sequence[Node], round_of: Callable[[Node], int], current_round: int,
                  level: str, maximize: bool) -> dict[str, BranchHealth]:
    """The health of every branch in the plan's slots, with the kill rule applied."""
    return {b.id: _health(b, [n for n in nodes if node_branch(n) == b.id], round_of, current_round, level,
                          maximize) for b in plan.slots}


def _health(branch: Branch, nodes: list[Node], round_of: Callable[[Node], int], current_round: int,
            level: str, maximize: bool) -> BranchHealth:
    done = [n for n in nodes if n.status.terminal]
    scored = [n for n in done if n.score(level) is not None]
    failed = sum(1 for n in done if n.status == FAILED)
    invalid = failed / len(done) if done else 0.0
    best_node = None
    if scored:
        pick = max if maximize else min
        best = pick(n.score(level) for n in scored)
        best_node = min((n for n in scored if n.score(level) == best),
                        key=lambda n: (round_of(n), n.created_at))
        last_gain = max(branch.born_round, round_of(best_node))
    else:
        last_gain = branch.born_round
    stall = max(0, current_round - last_gain)
    sat = [s for s in (TuningData.peek(n).saturation for n in done) if s]
    spreads = [s["spread"] for s in sat if "spread" in s]
    flat = [s["improved"] == 0 for s in sat if "improved" in s]
    reason = _kill_reason(branch.kill, len(done), stall, invalid)
    return BranchHealth(
        branch.id, len(done), len(scored), failed, invalid,
        None if best_node is None else best_node.score(level),
        None if best_node is None else best_node.id, stall,
        mean(spreads) if spreads else None, sum(flat) / len(flat) if flat else None,
        reason is not None, reason)


def _kill_reason(kill: KillCriteria, candidates: int, stall: int, invalid: float) -> str | None:
    """Why the kill criteria retire the branch, or None while it may live."""
    if candidates < kill.min_candidates:
        return None
    if stall >= kill.stall_rounds:
        return f"no improvement for {stall} rounds (stall_rounds={kill.stall_rounds})"
    if invalid > kill.max_invalid_rate:
        return f"invalid rate {invalid:.0%} > {kill.max_invalid_rate:.0%} of {candidates} candidates"
    return None


def describe_health(health: BranchHealth | None) -> str:
    """One line of a branch's health, for prompts and the plan's markdown."""
    if health is None:
        return "new branch: no candidates yet"
    best = "none" if health.best is None else f"{health.best:.6g} (node {health.best_node_id})"
    spread = "n/a" if health.trial_spread is None else f"{health.trial_spread:.4g}"
    flat = "n/a" if health.saturated_share is None else f"{health.saturated_share:.0%}"
    line = (f"{health.candidates} candidates ({health.evaluated} scored, {health.failed} failed, "
            f"invalid rate {health.invalid_rate:.0%}), best {best}, "
            f"{_rounds(health.rounds_since_improvement)} since improvement, trial spread {spread}, "
            f"saturated studies {flat}")
    return line + (f"; KILLED: {health.kill_reason}" if health.killed else "")


def _rounds(n: int) -> str:
    return f"{n} round" + ("" if n == 1 else "s")


def plan_md(plan: Plan, health: dict[str, BranchHealth], history: Sequence[Plan]) -> str:
    """research_plan.md: author, slots with hypothesis, kill criteria and health, this version's
    decisions, retired branches with why, and the versions so far."""
    parts = [f"Author: {plan.author}", "", f"# Research plan, version {plan.version} (round {plan.round})"]
    if plan.notes:
        parts += ["", f"Notes: {plan.notes}"]
    parts += ["", "## Slots"]
    for b in sorted(plan.slots, key=lambda b: b.slot):
        parts += ["", f"### Slot {b.slot}: {b.id}", f"- Hypothesis: {b.hypothesis}",
                  f"- Origin: {b.origin}, born in round {b.born_round}",
                  f"- Kill criteria: {b.kill.describe()}", f"- Health: {describe_health(health.get(b.id))}"]
    parts += ["", "## Decisions of this version", ""]
    parts += [_decision_line(d) for d in plan.decisions] or ["none (the initial plan)"]
    parts += ["", "## Retired branches", ""]
    parts += [f"- {b.id} (slot {b.slot}, born in round {b.born_round}): {b.hypothesis} — {why}"
              for b, why in plan.retired] or ["none"]
    versions = {p.version: p for p in (*history, plan)}
    parts += ["", "## Versions", "", "| version | round | author | refreshed | retired |",
              "|---|---|---|---|---|"]
    for p in (versions[v] for v in sorted(versions)):
        count = {a: sum(1 for d in p.decisions if d.action == a) for a in ("refresh", "retire")}
        parts.append(f"| {p.version} | {p.round} | {p.author} | {count['refresh']} | {count['retire']} |")
    return "\n".join(parts) + "\n"


def _decision_line(d: SlotDecision) -> str:
    into = f" → {d.new_branch_id}" if d.new_branch_id else ""
    return f"- Slot {d.slot} ({d.branch_id}): {d.action}{into} — {d.reason}"
