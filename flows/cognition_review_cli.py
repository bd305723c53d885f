"""`evoforge cognition review`: a person accepts, edits or rejects pending items; only accepted
items are retrieved by a run. Interactive in the terminal, or by id / from a file for scripts."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from evoforge.cognition import CognitionError
from evoforge.cognition.entries import ACCEPTED, PENDING, REJECTED, CognitionItem

_KEYS = "[a]ccept  [e]dit  [r]eject  [s]kip  [q]uit"
_VERBS = {"accept": ACCEPTED, "reject": REJECTED}


def decisions_from(path: Path) -> list[tuple[str, str]]:
    """The (item id, status) lines of a decisions file: `accept ID` or `reject ID`, `#` comments."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CognitionError(f"{path}: cannot read it ({type(exc).__name__})") from None
    decisions = []
    for number, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2 or words[0].lower() not in _VERBS:
            raise CognitionError(f"{path}:{number}: expected 'accept ID' or 'reject ID', "
                                 f"got '{line.strip()}'")
        decisions.append((words[1], _VERBS[words[0].lower()]))
    return decisions


def _decide(base: Any, decisions: list[tuple[str, str]]) -> None:
    """Apply the decisions after checking every id is a pending item (none applied otherwise)."""
    pending = {item.id for item in base.list(status=PENDING)}
    for item_id, _ in decisions:
        if item_id not in pending:
            known = base.get(item_id)
            why = f"it is {known.status}" if known else "no such item"
            raise CognitionError(f"no pending cognition item with id '{item_id}' in {base.folder} ({why})")
    for item_id, status in decisions:
        base.set_status(item_id, status)
    counts = {status: sum(1 for _, s in decisions if s == status) for status in (ACCEPTED, REJECTED)}
    print(f"accepted {counts[ACCEPTED]}, rejected {counts[REJECTED]}; "
          f"{len(base.list(status=PENDING))} pending left")


def _show(item: CognitionItem, number: int, total: int) -> None:
    print(f"\n[{number}/{total}] {item.id}  {item.title}")
    print(f"  idea:   {item.text}")
    print(f"  quote:  \"{item.quote}\"")
    print(f"  source: {item.source}, {item.locator}")
    print(f"  from:   {item.provenance}")


def _ask(prompt: str) -> str | None:
    """A line typed by the user, or None at the end of the input."""
    try:
        return input(prompt)
    except EOFError:
        return None


def _interactive(base: Any, items: list[CognitionItem]) -> None:
    """Ask about each pending item in turn until they are done or the user quits."""
    done = {ACCEPTED: 0, REJECTED: 0, "edited": 0, "skipped": 0}
    for number, item in enumerate(items, start=1):
        _show(item, number, len(items))
        while True:
            key = _ask(f"{_KEYS}? ")
            key = "q" if key is None else key.strip().lower()[:1]
            if key in ("a", "e", "r", "s", "q"):
                break
            print(f"  type one of {_KEYS}")
        if key == "q":
            break
        if key == "e":
            title = _ask(f"  new title (Enter keeps '{item.title}'): ") or ""
            text = _ask("  new text (Enter keeps it): ") or ""
            base.replace(replace(item, title=title.strip() or item.title, text=text.strip() or item.text,
                                 status=ACCEPTED))
            done["edited"] += 1
            done[ACCEPTED] += 1
        elif key in ("a", "r"):
            status = ACCEPTED if key == "a" else REJECTED
            base.set_status(item.id, status)
            done[status] += 1
        else:
            done["skipped"] += 1
    print(f"accepted {done[ACCEPTED]} ({done['edited']} edited), rejected {done[REJECTED]}, skipped "
          f"{done['skipped']}; {len(base.list(status=PENDING))} pending left")


def run_review(ns: argparse.Namespace) -> int:
    """Run `cognition review`; returns the exit code."""
    from evoforge.cognition import open_base
    from evoforge.infra.config_load import load_config

    cfg = load_config(ns.config, {"workspace": ns.workspace})
    base = open_base(cfg.cognition, cfg.workspace)
    pending = base.list(task=ns.task, status=PENDING)
    if ns.list:
        if ns.json:
            print(json.dumps([asdict(item) for item in pending], indent=2))
        for item in [] if ns.json else pending:
            print(f"{item.id}  {item.title}  ({item.source}, {item.locator})")
        return 0
    decisions = [(i, ACCEPTED) for i in ns.accept] + [(i, REJECTED) for i in ns.reject]
    if ns.from_file is not None:
        decisions += decisions_from(ns.from_file)
    if ns.accept_all:
        decisions += [(item.id, ACCEPTED) for item in pending]
    if decisions:
        _decide(base, decisions)
    elif not pending:
        print(f"no pending items in {base.folder}")
    else:
        _interactive(base, pending)
    return 0
