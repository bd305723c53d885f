"""The plan agent (ml-evolve's): keeps, refreshes or retires the hypothesis branch in every slot.

The LLM sees each branch's health and the leaderboard and answers one line per slot; the kill
criteria are enforced in code (a killed branch loses its slot whatever the answer says), and the
offline planner, an LLM error or an unparsable answer leave the health rules alone in charge.
Everything here is pure except the one LLM call.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from evoforge.infra.llm.authorship import OFFLINE, SIMULATED, answer_kind
from evoforge.infra.llm.scheduler import PLAN, asking
from evoforge.infra.llm.types import Completion, LLMBackend, LLMError
from evoforge.infra.llm_traces import trace_call
from evoforge.infra.nodes import Node
from evoforge.infra.prompt_format import PLAN_MARKER, PlanSlot, render_plan_slot
from evoforge.stages.rounds.branches import (
    GENERIC_HYPOTHESES,
    Branch,
    BranchHealth,
    KillCriteria,
    Plan,
    SlotDecision,
    branch_health,
    describe_health,
)
from evoforge.stages.rounds.plan_data import node_branch

OFFLINE_AUTHOR = "offline (no LLM): health rules only"
SIMULATED_AUTHOR = "simulated (llm-sim)"
SYSTEM = (
    "You are the plan agent of an evolutionary search over ML pipelines: you own the search's "
    "breadth. Every slot holds one hypothesis branch; judge each from its health and the "
    "leaderboard, then keep it, refresh its direction, or retire it for a new hypothesis."
)
_MAX_ROWS = 20
_MAX_TEXT = 300
_LINE_START = r"^[\s>*_`#-]*(?:\d+[.)]\s*)?"
_SLOT_RE = re.compile(_LINE_START + r"slot[\s*_`]*(\d+)[\s*_`]*(?:\(\s*B\d+\s*\)[\s*_`]*)?"
                      r"[:=.)\-\u2013\u2014]?[\s*_`]*([a-z]+)[\s*_`]*[:\-\u2013\u2014]?\s*(.*)$", re.I)
_KILL_RE = re.compile(_LINE_START + r"kill[\s*_`]*(\d+)[\s*_`]*[:=.)\-\u2013\u2014]?(.*)$", re.I)
_STALL_RE = re.compile(r"stall_?rounds\s*[=:]\s*(\d+)", re.I)
_RATE_RE = re.compile(r"(?:max_)?invalid_?rate\s*[=:]\s*(\d*\.?\d+)\s*(%?)", re.I)
_MERGE_WORDS = ("merge", "combine", "join", "fuse")
_OTHER_SLOT_RE = re.compile(r"\b(?:slot|branch)\s*#?\d+\b|\bB\d+\b", re.I)


class LeaderRow(NamedTuple):
    """One leaderboard row shown to the plan agent."""

    node_id: str
    branch: str | None
    search_score: float | None
    full_score: float | None


Row = LeaderRow | Mapping[str, Any]  # or a mapping with keys node, branch, score, full


@dataclass(frozen=True)
class SlotAnswer:
    """What the plan agent's answer asks for one slot (keep when the answer leaves it out)."""

    slot: int
    action: str  # keep | refresh | retire
    text: str  # the new direction (refresh) or hypothesis (retire; '' lets the rules pick one)
    reason: str
    stated: bool  # the answer had a usable line for this slot
    kill: KillCriteria | None = None  # new kill criteria asked for by a KILL line


def build_leaderboard(nodes: Sequence[Node], level: str, maximize: bool,
                      limit: int = _MAX_ROWS) -> list[LeaderRow]:
    """The best `limit` nodes at the search level, best first."""
    scored = [n for n in nodes if n.score(level) is not None]
    scored.sort(key=lambda n: n.score(level), reverse=maximize)
    return [LeaderRow(n.id, node_branch(n), n.score(level), n.score_full) for n in scored[:limit]]


def plan_messages(plan: Plan, health: dict[str, BranchHealth], leaderboard_rows: Sequence[Row],
                  task_description: str, level: str) -> list[dict[str, str]]:
    """The prompt: the slots with their kill criteria and health, the leaderboard, the answer form."""
    about = " ".join(task_description.split())[:1500] or "(no description)"
    parts = [f"{PLAN_MARKER} revise the research plan (version {plan.version}, made in round "
             f"{plan.round}); it has {len(plan.slots)} slots.", "## Task", about, "## Slots"]
    for b in sorted(plan.slots, key=lambda b: b.slot):
        h = health.get(b.id)
        parts += [render_plan_slot(PlanSlot(b.slot, b.id, b.hypothesis, h is not None and h.killed)),
                  f"- Kill criteria: {b.kill.describe()}", f"- Health: {describe_health(h)}"]
    parts += [f"## Leaderboard (search level: {level})", f"| node | branch | {level} | full |",
              "|---|---|---|---|"]
    rows = [f"| {node} | {branch or '-'} | {_fmt(score)} | {_fmt(full)} |"
            for node, branch, score, full in map(_row, list(leaderboard_rows)[:_MAX_ROWS])]
    parts += rows or ["| (no scored candidates yet) | | | |"]
    parts.append(_INSTRUCTIONS)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(parts)}]


_INSTRUCTIONS = """## Answer
For every slot, one line:
SLOT <n>: keep | refresh: <new direction> | retire: <new hypothesis>
Optionally, to change a slot's kill criteria:
KILL <n>: stall_rounds=<int> invalid_rate=<float>
A refresh keeps the branch and its candidates and changes its direction; a retire ends the branch
and starts a new hypothesis in its slot. Slots cannot be merged, and no two slots may hold the same
hypothesis. A branch marked KILLED broke its kill criteria and loses its slot whatever you answer:
give it a `retire:` line with the hypothesis to put in its place. A slot you leave out is kept."""


def parse_plan_answer(text: str, plan: Plan, limits: KillCriteria | None = None) -> list[SlotAnswer]:
    """One SlotAnswer per slot of the plan, in slot order: the answer's line for it, else keep;
    merges and duplicate hypotheses are refused (kept, with the refusal as the reason). A KILL
    line may tighten a slot's kill criteria, never loosen them past `limits` (the configured
    ones; default: the slot's own): a looser value is capped, and the reason says so."""
    current = {b.slot: b for b in plan.slots}
    found: dict[int, SlotAnswer] = {}
    kills: dict[int, tuple[KillCriteria, str]] = {}
    for line in text.splitlines():
        if (m := _SLOT_RE.match(line)) and int(m.group(1)) in current and int(m.group(1)) not in found:
            found[int(m.group(1))] = _slot_answer(int(m.group(1)), m.group(2).lower(), _clean(m.group(3)))
        elif (k := _KILL_RE.match(line)) and int(k.group(1)) in current:
            slot = current[int(k.group(1))]
            kill = _kill(k.group(2), slot.kill, limits or slot.kill)
            if kill is not None:
                kills[int(k.group(1))] = kill
    answers = [found.get(n, SlotAnswer(n, "keep", "", "not in the answer: kept", False))
               for n in sorted(current)]
    answers = _refuse_duplicates(answers, current)
    out = []
    for a in answers:
        kill, capped = kills.get(a.slot, (None, ""))
        out.append(replace(a, kill=kill, reason=a.reason + capped))
    return out


def _slot_answer(slot: int, action: str, text: str) -> SlotAnswer:
    """The answer for one slot line, refusing merges and refreshes without a direction."""
    merging = any(w in text.lower() for w in _MERGE_WORDS) and _OTHER_SLOT_RE.search(text)
    if action.startswith(_MERGE_WORDS) or merging:
        said = f"{action} {text}".strip()
        return SlotAnswer(slot, "keep", "", f"refused: slots cannot be merged ('{said}'); kept", True)
    if action == "keep":
        return SlotAnswer(slot, "keep", "", "the plan agent kept it" + (f": {text}" if text else ""), True)
    if action == "refresh" and text:
        return SlotAnswer(slot, "refresh", text, "the plan agent refreshed its direction", True)
    if action == "retire":
        return SlotAnswer(slot, "retire", text, "the plan agent retired it", True)
    return SlotAnswer(slot, "keep", "", f"refused: '{action} {text}'".rstrip() + " is not keep, refresh: "
                      "<direction> or retire: <hypothesis>; kept", True)


def _refuse_duplicates(answers: list[SlotAnswer], current: dict[int, Branch]) -> list[SlotAnswer]:
    """Refuse a change whose new text is another slot's hypothesis (a merge in disguise) or its own."""
    taken = {_norm(current[a.slot].hypothesis) for a in answers if a.action == "keep"}
    out = []
    for a in answers:
        if a.action != "keep" and a.text:
            key = _norm(a.text)
            if key in taken or key == _norm(current[a.slot].hypothesis):
                a = SlotAnswer(a.slot, "keep", "", f"refused: '{a.text}' is already a slot's hypothesis "
                               f"(slots cannot be merged); kept", True)
            taken.add(key)
        out.append(a)
    return out


def _kill(rest: str, old: KillCriteria, limits: KillCriteria) -> tuple[KillCriteria, str] | None:
    """The kill criteria a KILL line asks for, at most as loose as `limits`, and a note of what was
    capped ("" when nothing was); None when the line names none.

    >>> limits = KillCriteria(stall_rounds=4, max_invalid_rate=0.6, min_candidates=3)
    >>> _kill("stall_rounds=2", limits, limits)[0].stall_rounds
    2
    >>> kill, note = _kill("stall_rounds=50 invalid_rate=100%", limits, limits)
    >>> (kill.stall_rounds, kill.max_invalid_rate), note
    ((4, 0.6), '; KILL capped: stall_rounds 50 -> 4, max_invalid_rate 1 -> 0.6 (the configured limits)')
    """
    stall, rate = _STALL_RE.search(rest), _RATE_RE.search(rest)
    if stall is None and rate is None:
        return None
    asked_stall = max(1, int(stall.group(1))) if stall else old.stall_rounds
    asked_rate = (old.max_invalid_rate if rate is None
                  else float(rate.group(1)) / (100 if rate.group(2) else 1))
    capped = []
    if asked_stall > limits.stall_rounds:
        capped.append(f"stall_rounds {asked_stall} -> {limits.stall_rounds}")
    if asked_rate > limits.max_invalid_rate:
        capped.append(f"max_invalid_rate {asked_rate:g} -> {limits.max_invalid_rate:g}")
    kill = KillCriteria(min(asked_stall, limits.stall_rounds), min(asked_rate, limits.max_invalid_rate),
                        old.min_candidates)
    return kill, (f"; KILL capped: {', '.join(capped)} (the configured limits)" if capped else "")


async def replan(plan: Plan, nodes: Sequence[Node], *, llm: LLMBackend | None, round: int,
                 round_of: Callable[[Node], int], level: str, maximize: bool, task_description: str,
                 leaderboard_rows: Sequence[Row], temperature: float, max_tokens: int,
                 fresh_hypotheses: Sequence[str], limits: KillCriteria | None = None
                 ) -> tuple[Plan, dict[str, BranchHealth], Completion | None]:
    """The next plan version: the health rules, then the plan agent's answer where they allow it."""
    health = branch_health(plan, nodes, round_of, round, level, maximize)
    answers = [SlotAnswer(b.slot, "keep", "", "health rules only: within its kill criteria", False)
               for b in sorted(plan.slots, key=lambda b: b.slot)]
    author, notes, completion = OFFLINE_AUTHOR, [], None
    if llm is not None and llm.name != "offline":
        messages = plan_messages(plan, health, leaderboard_rows, task_description, level)
        started_at, start = time.time(), time.perf_counter()
        try:
            with asking(PLAN):
                completion = await llm.complete(messages, temperature=temperature, max_tokens=max_tokens)
        except LLMError as exc:
            trace_call(llm, messages, started_at, time.perf_counter() - start, error=str(exc))
            author = f"health rules only: the plan call to {llm.name} (model {llm.model}) failed"
            notes.append(f"LLM error: {exc}")
        else:
            trace_call(llm, messages, started_at, completion.seconds, completion)
            parsed = parse_plan_answer(completion.text, plan, limits)
            if any(a.stated for a in parsed):
                answers, author = parsed, _author(completion)
                notes += [f"slot {a.slot}: {a.reason}" for a in parsed if a.reason.startswith("refused")]
            else:
                author = f"health rules only: the answer of {_author(completion)} had no SLOT lines"
                notes.append(f"unparsable answer: {' '.join(completion.text.split())[:200]!r}")
    new = _apply(plan, health, answers, round, fresh_hypotheses, author, "; ".join(notes))
    return new, health, completion


def _apply(plan: Plan, health: dict[str, BranchHealth], answers: list[SlotAnswer], round: int,
           fresh: Sequence[str], author: str, notes: str) -> Plan:
    """The plan with every slot's answer applied, killed branches retired whatever was answered."""
    by_slot = {a.slot: a for a in answers}
    steps = []  # (old branch, action, new hypothesis or None to pick a fresh one, reason, answer)
    for b in sorted(plan.slots, key=lambda b: b.slot):
        a, h = by_slot[b.slot], health[b.id]
        if h.killed:
            said = f"; the plan agent said {a.action}, overruled" if a.stated and a.action != "retire" else ""
            text = a.text if a.action == "retire" and a.text else None
            steps.append((b, "retire", text, f"killed: {h.kill_reason}{said}", a))
        elif a.action == "retire":
            steps.append((b, "retire", a.text or None, a.reason, a))
        else:
            was = f" (was: {b.hypothesis})" if a.action == "refresh" else ""
            steps.append((b, a.action, a.text or b.hypothesis, a.reason + was, a))
    used = {_norm(t) for _, _, t, _, _ in steps if t} | {_norm(b.hypothesis) for b, _ in plan.retired}
    used |= {_norm(b.hypothesis) for b, action, *_ in steps if action == "retire"}
    next_id = 1 + max((int(b.id[1:]) for b in (*plan.slots, *(r for r, _ in plan.retired))
                       if re.fullmatch(r"B\d+", b.id)), default=0)
    slots, retired, decisions = [], list(plan.retired), []
    for b, action, text, reason, a in steps:
        kill = a.kill or b.kill
        if action != "retire":
            slots.append(replace(b, hypothesis=text, kill=kill))
            decisions.append(SlotDecision(b.slot, b.id, action, reason))
            continue
        origin = "llm" if text else "offline"
        if text is None:
            text = _pick_fresh(fresh, used, b.slot, round)
        used.add(_norm(text))
        new = Branch(f"B{next_id}", b.slot, text, kill, round, origin)
        next_id += 1
        slots.append(new)
        retired.append((b, reason))
        decisions.append(SlotDecision(b.slot, b.id, "retire", reason, new.id))
    return Plan(plan.version + 1, round, tuple(slots), tuple(retired), tuple(decisions), author, notes)


def _pick_fresh(fresh: Sequence[str], used: set[str], slot: int, round: int) -> str:
    """The first fresh hypothesis, else generic one, that no slot or retired branch holds."""
    for text in (*fresh, *GENERIC_HYPOTHESES):
        if text.strip() and _norm(text) not in used:
            return " ".join(text.split())
    return f"explore a direction unlike the retired branches (slot {slot}, round {round})"


def _author(completion: Completion) -> str:
    """Who wrote the plan agent's answer, said plainly."""
    kind = answer_kind(completion)
    if kind == OFFLINE:
        return OFFLINE_AUTHOR
    return SIMULATED_AUTHOR if kind == SIMULATED else f"LLM {completion.model or 'unknown'}"


def _row(row: Row) -> LeaderRow:
    """A leaderboard row as a LeaderRow, from a tuple or a {node, branch, score, full} mapping."""
    if isinstance(row, Mapping):
        branch = row.get("branch")
        return LeaderRow(str(row["node"]), None if branch in (None, "-") else str(branch),
                         row.get("score"), row.get("full"))
    return LeaderRow(*row)


def _clean(text: str) -> str:
    return " ".join(text.strip().strip("*_`\"' ").split())[:_MAX_TEXT]


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"
