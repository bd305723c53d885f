"""`playbook`: ACE's itemised context, changed only by delta operations, never rewritten.

A playbook is sections (`## NAME`) of bullets, one a line, each with an id and counters:

    ## CONVERSIONS
    [conv-1] helpful=0 harmful=0 :: 1 mile = 1.609 km

An answer gives its changes as one fenced JSON block, `{"operations": [...]}`, applied in order:
`ADD` (`section`, `content`: a new bullet, numbered after the highest id of its prefix), `UPDATE`
(`id`, `content`: the counters stay), `REMOVE` (`id`) and `TAG` (`id`, `tag`: `helpful` or
`harmful`, one more on that counter). The merge is deterministic; an operation naming a bullet the
playbook lacks fails the candidate with that reason, and so does a rewrite, so the context grows
and is refined item by item and never collapses into a summary.

    >>> kind = Playbook(program_name="playbook.md")
    >>> parent = "## CONVERSIONS\\n[conv-1] helpful=0 harmful=0 :: 1 mile = 1.609 km\\n"
    >>> ops = '{"operations": [{"type": "ADD", "section": "CONVERSIONS", "content": "1 inch = 2.54 cm"},'
    >>> ops += ' {"type": "TAG", "id": "conv-1", "tag": "helpful"}]}'
    >>> print(kind.apply(parent, "Add inches.\\n```json\\n" + ops + "\\n```\\n").code, end="")
    ## CONVERSIONS
    [conv-1] helpful=1 harmful=0 :: 1 mile = 1.609 km
    [conv-2] helpful=0 harmful=0 :: 1 inch = 2.54 cm
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from evoforge.infra.artifacts.base import Applied, OneFile
from evoforge.infra.edits import parse_answer
from evoforge.infra.evolve_block import EditError
from evoforge.infra.failure_reasons import EMPTY, MALFORMED
from evoforge.infra.prompt_format import render_program_section

PLAYBOOK_FENCE = "playbook"  # the fence language of a playbook in a prompt
OPERATIONS = ("ADD", "UPDATE", "REMOVE", "TAG")
_SECTION = re.compile(r"^##\s+(\S.*?)\s*$")
_BULLET = re.compile(r"^\[([A-Za-z0-9_.-]+)\]\s+helpful=(\d+)\s+harmful=(\d+)\s+::\s?(.*)$")


@dataclass
class Bullet:
    """One item of the playbook."""

    id: str
    helpful: int
    harmful: int
    content: str

    def line(self) -> str:
        return f"[{self.id}] helpful={self.helpful} harmful={self.harmful} :: {self.content}"


def parse_playbook(text: str) -> dict[str, list[Bullet]]:
    """The sections of a playbook, in order; ValueError naming the first line that is neither."""
    sections: dict[str, list[Bullet]] = {}
    current: list[Bullet] | None = None
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        header, bullet = _SECTION.match(line), _BULLET.match(line)
        if header:
            current = sections.setdefault(header.group(1), [])
        elif bullet and current is not None:
            if bullet.group(1) in seen:
                raise ValueError(f"line {number}: bullet id '{bullet.group(1)}' appears twice")
            seen.add(bullet.group(1))
            current.append(Bullet(bullet.group(1), int(bullet.group(2)), int(bullet.group(3)),
                                  bullet.group(4).strip()))
        else:
            raise ValueError(f"line {number} is neither a '## SECTION' line nor a bullet "
                             f"'[id] helpful=0 harmful=0 :: text' under a section: {line[:60]!r}")
    if not sections:
        raise ValueError("the playbook has no '## SECTION' line")
    return sections


def render_playbook(sections: dict[str, list[Bullet]]) -> str:
    """The playbook's text: each section's line, then its bullets."""
    return "".join(f"## {name}\n" + "".join(b.line() + "\n" for b in bullets)
                   for name, bullets in sections.items())


class Playbook(OneFile):
    """ACE's playbook: bullets with ids and counters, changed only by delta operations."""

    name = "playbook"
    about = "ACE's itemised context (bullets with ids and counters), changed only by delta operations"

    noun = "playbook"
    expert = "an expert at curating an assistant's context"
    task_keys = {"playbook": "the file of the playbook to evolve (or prompts:/NAME@ALIAS in MLflow)"}
    required_keys, seed_key = ("playbook",), "playbook"
    runs_on_task_model = True

    def show(self, artifact: str) -> str:
        return render_program_section(artifact, PLAYBOOK_FENCE, self.noun)

    def fence(self) -> str:
        return PLAYBOOK_FENCE

    def answer_forms(self) -> str:
        return f"## How to answer\n{self.edit_rules()}\n"

    def edit_rules(self) -> str:
        return ("Start with one or two sentences of motivation: what you change and why it should help. "
                "The playbook is sections of bullets `[id] helpful=n harmful=n :: text`; it changes only "
                "by delta operations, whatever the answer format named last says: after the motivation "
                'give one ```json block {"operations": [...]} with, in order, '
                '{"type": "ADD", "section": "NAME", "content": "..."}, {"type": "UPDATE", "id": "...", '
                '"content": "..."}, {"type": "REMOVE", "id": "..."} or {"type": "TAG", "id": "...", '
                '"tag": "helpful" | "harmful"}. Do not rewrite the playbook.')

    def format_reminder(self, form: str) -> str:
        return "delta operations in one ```json block, as described above"

    def apply(self, parent: str, answer: str) -> Applied:
        parsed = parse_answer(answer)  # the motivation, and the fenced block
        if parsed.code is None:
            raise EditError('a playbook changes only by delta operations: give a ```json block with '
                            '{"operations": [...]}, not SEARCH/REPLACE blocks', MALFORMED)
        operations = _operations(parsed.code)
        sections = parse_playbook(parent)
        for number, op in enumerate(operations, start=1):
            _apply(sections, op, number)
        code = render_playbook(sections)
        if code == render_playbook(parse_playbook(parent)):
            raise EditError("the delta operations do not change the playbook", EMPTY)
        return Applied(code, parsed.motivation)

    def merge(self, ancestor: str, ours: str, theirs: str) -> str | None:
        """`ours` with `theirs`'s changes since `ancestor` replayed on it as delta operations: its
        new bullets added (renumbered; one already there by content is not added twice), its
        updates and removals of bullets `ours` left as they were, its counter increments; an
        operation that no longer applies is left out.

        >>> anc = "## S\\n[s-1] helpful=0 harmful=0 :: a\\n"
        >>> ours = "## S\\n[s-1] helpful=1 harmful=0 :: a\\n[s-2] helpful=0 harmful=0 :: b\\n"
        >>> theirs = "## S\\n[s-1] helpful=0 harmful=1 :: a\\n[s-2] helpful=0 harmful=0 :: c\\n"
        >>> print(Playbook(program_name="p.md").merge(anc, ours, theirs), end="")
        ## S
        [s-1] helpful=1 harmful=1 :: a
        [s-2] helpful=0 harmful=0 :: b
        [s-3] helpful=0 harmful=0 :: c
        """
        sections = parse_playbook(ours)
        for number, op in enumerate(_changes(parse_playbook(ancestor), parse_playbook(theirs), sections), 1):
            try:
                _apply(sections, op, number)
            except EditError:
                continue
        return render_playbook(sections)



def _operations(block: str) -> list[dict]:
    try:
        data = json.loads(block)
    except json.JSONDecodeError as exc:
        raise EditError(f"a playbook changes only by delta operations; the fenced block is not JSON "
                        f"({exc.msg} at line {exc.lineno})", MALFORMED) from None
    ops = data.get("operations") if isinstance(data, dict) else data
    if not isinstance(ops, list) or not ops or not all(isinstance(op, dict) for op in ops):
        raise EditError('the JSON block must be {"operations": [...]} with at least one operation object',
                        MALFORMED)
    return ops


def _apply(sections: dict[str, list[Bullet]], op: dict, number: int) -> None:
    kind = str(op.get("type", "")).upper()
    where = f"delta operation {number} ({kind or 'no type'})"
    if kind not in OPERATIONS:
        raise EditError(f"{where}: type must be one of {', '.join(OPERATIONS)}", MALFORMED)
    if kind == "ADD":
        section, content = op.get("section"), _content(op, where)
        if not isinstance(section, str) or not section.strip():
            raise EditError(f"{where}: 'section' must name the section to add to", MALFORMED)
        bullets = sections.setdefault(section.strip(), [])
        if any(b.content == content for b in bullets):
            return  # already there: the merge keeps one
        bullets.append(Bullet(_next_id(sections, section.strip()), 0, 0, content))
        return
    bullet_id = op.get("id")
    found = next(((bullets, b) for bullets in sections.values() for b in bullets if b.id == bullet_id), None)
    if found is None:
        raise EditError(f"{where} names bullet '{bullet_id}', which the playbook does not have", MALFORMED)
    bullets, bullet = found
    if kind == "UPDATE":
        bullet.content = _content(op, where)
    elif kind == "REMOVE":
        bullets.remove(bullet)
    else:
        tag = op.get("tag")
        if tag not in ("helpful", "harmful"):
            raise EditError(f"{where}: 'tag' must be helpful or harmful, got {tag!r}", MALFORMED)
        setattr(bullet, tag, getattr(bullet, tag) + 1)


def _content(op: dict, where: str) -> str:
    content = op.get("content")
    if not isinstance(content, str) or not content.strip():
        raise EditError(f"{where}: 'content' must be the bullet's text", MALFORMED)
    return " ".join(content.split())


def _next_id(sections: dict[str, list[Bullet]], section: str) -> str:
    """The id after the highest of the section's prefix (the first bullet's, else the name's)."""
    bullets = sections[section]
    prefix = bullets[0].id.rsplit("-", 1)[0] if bullets else re.sub(r"[^a-z0-9]", "", section.lower())[:6]
    prefix = prefix or "item"
    numbers = [int(b.id.rsplit("-", 1)[1]) for items in sections.values() for b in items
               if b.id.rsplit("-", 1)[0] == prefix and b.id.rsplit("-", 1)[-1].isdigit()]
    return f"{prefix}-{max(numbers, default=0) + 1}"


def tag_bullets(playbook: str, tags: list[tuple[str, str]]) -> tuple[str, int]:
    """`playbook` with one more on the named counter of each (bullet id, helpful|harmful) pair,
    and how many applied: a pair naming a bullet the playbook no longer has (removed since it was
    tagged) is skipped, so tags merge deterministically onto any later version.

    >>> tag_bullets("## S\\n[s-1] helpful=0 harmful=0 :: x\\n", [("s-1", "harmful"), ("s-9", "helpful")])
    ('## S\\n[s-1] helpful=0 harmful=1 :: x\\n', 1)
    """
    sections = parse_playbook(playbook)
    known = {b.id: b for bullets in sections.values() for b in bullets}
    applied = 0
    for bullet_id, tag in tags:
        if bullet_id in known and tag in ("helpful", "harmful"):
            setattr(known[bullet_id], tag, getattr(known[bullet_id], tag) + 1)
            applied += 1
    return render_playbook(sections), applied


def _changes(ancestor: dict[str, list[Bullet]], theirs: dict[str, list[Bullet]],
             ours: dict[str, list[Bullet]]) -> list[dict]:
    """`theirs`'s changes since `ancestor` as delta operations onto `ours` (see Playbook.merge)."""
    before = {b.id: b for bullets in ancestor.values() for b in bullets}
    mine = {b.id: b for bullets in ours.values() for b in bullets}
    ops: list[dict] = []
    for section, bullets in theirs.items():
        for bullet in bullets:
            old = before.get(bullet.id)
            if old is None:
                ops.append({"type": "ADD", "section": section, "content": bullet.content})
                continue
            unchanged_here = bullet.id in mine and mine[bullet.id].content == old.content
            if bullet.content != old.content and unchanged_here:
                ops.append({"type": "UPDATE", "id": bullet.id, "content": bullet.content})
            for tag in ("helpful", "harmful"):
                more = max(0, getattr(bullet, tag) - getattr(old, tag))
                ops += [{"type": "TAG", "id": bullet.id, "tag": tag}] * more
    kept = {b.id for bullets in theirs.values() for b in bullets}
    for bullet_id, old in before.items():
        if bullet_id not in kept and bullet_id in mine and mine[bullet_id].content == old.content:
            ops.append({"type": "REMOVE", "id": bullet_id})
    return ops
