"""The node columns of earlier evoforge versions whose data is stage-owned now: which stage owns
each, and how a value an earlier version wrote is folded into the node's owned data."""

from __future__ import annotations

import json
from typing import Any, NamedTuple


class Moved(NamedTuple):
    """Where an earlier version's column lives now: its owner's field, and its empty default."""

    owner: str
    name: str
    default: Any = None
    text: bool = False  # a plain text column (else a VARCHAR column holds JSON)


# a writer moves these into the owned column when it opens the file (and drops them); a reader
# folds them in as it reads
LEGACY: dict[str, Moved] = {
    "attempts": Moved("debug", "attempts", []),
    "trials_run": Moved("param_search", "trials_run", 0),
    "saturation": Moved("param_search", "saturation", {}),
    "cognition_ids": Moved("learn", "cognition_ids", []),
    "inspiration_ids": Moved("research", "inspiration_ids", []),
    "inspirations_used": Moved("research", "inspirations_used", []),
    "prompt_dropped": Moved("research", "prompt_dropped", []),
    "ideas_used": Moved("research", "ideas_used", []),
    "score_default": Moved("engineer", "score_default"),
    "hardcoded": Moved("engineer", "hardcoded", []),
    "promoted_round": Moved("promotion", "round"),
    "judge_score": Moved("judge", "score"),
    "repeat_of": Moved("repeats", "repeat_of", text=True),
    "staleness": Moved("staleness", "staleness", 0),
    "reflection": Moved("staleness", "note", "", text=True),
    "analysis": Moved("analyze", "report", "", text=True),
    "lessons": Moved("analyze", "lessons", []),
    "branch": Moved("plan", "branch", text=True),
}
# the reflect stage's outcome, noted as text only (in `reflection`) before it was typed
# (stages/reflect_data.py): the note's phrase -> the outcome, set once when a file is moved
_REFLECT_NOTES = (("reflection call failed", "call_failed"), ("reflection: patched", "patched"),
                  ("reflection: patch unusable", "unusable_patch"), ("reflection: dropped", "dropped"),
                  ("reflection: no decision", "undecided"), ("reflection: kept", "kept"))


def fold_legacy(owned: dict[str, Any], column: str, value: Any) -> None:
    """Put an earlier version's column value under its owner, unless it is NULL or the empty
    default, or the owner has it already (a dataclass: written by this version, it wins)."""
    moved = LEGACY[column]
    if isinstance(value, str) and not moved.text:
        value = json.loads(value)
    if value is None or value == moved.default:
        return
    data = owned.get(moved.owner)
    if data is None:
        data = owned[moved.owner] = {}
    if isinstance(data, dict) and moved.name not in data:
        data[moved.name] = value


def fold_reflect_outcome(owned: dict[str, Any]) -> None:
    """The typed reflect outcome of a node an earlier evoforge noted only as text, in its decoded
    owned JSON (its note folded in already), unless the reflect stage recorded one."""
    data, notes = owned.get("reflect") or {}, owned.get("staleness")
    if not isinstance(data, dict) or data.get("outcome"):
        return
    note = notes.get("note", "") if isinstance(notes, dict) else ""
    for phrase, outcome in _REFLECT_NOTES:
        if phrase in note:
            owned["reflect"] = {**data, "outcome": outcome}
            return
