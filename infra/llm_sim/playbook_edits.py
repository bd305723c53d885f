"""The simulator as a playbook curator: delta operations adding the factors the feedback shows missing.

A research prompt whose program section is fenced ``playbook`` (PLAYBOOK_LANGUAGE) carries a
playbook: ``## NAME`` section lines and bullets ``[<id>] helpful=<n> harmful=<n> :: <content>``
(BULLET_RE), and perhaps a feedback section (prompt_format.FEEDBACK_HEADER, one line per failed
case, maybe prefixed by its id). Whatever answer format it asks for (diff or rewrite), the answer
is one line starting with MOTIVATION, then one ``json`` fenced block ``{"operations": [...]}``.

Feedback: a line matching FEEDBACK_RE, "Expected <A> <to> for <Q> <from>" (the unit_playbook
task's wording, anywhere in the line, case-insensitive), gives the factor A / Q of the pair
(from, to), written with 4 significant digits ("0.4536"; "2.54" without trailing zeros); per pair
the line with the largest Q counts (the most precise; Q >= 11 pins 4 digits). Units compare by
playbook_model.unit_name(), factors as numbers.

The operations, in this order:

- For each pair whose factor no bullet states (playbook_model.stated_factors, the first bullet
  stating a pair wins), an ``ADD`` to CONVERSIONS of ``1 <from> = <factor> <to>`` (units as the
  feedback writes them); for a pair whose first bullet states another factor, an ``UPDATE`` of
  that bullet to that content. At most MAX_CONVERSIONS such operations, the pairs drawn with the
  rng (from the sorted list) when there are more.
- With such an operation, a ``TAG`` "helpful" of the first STRATEGIES bullet while its helpful
  count is 0 (so once in a lineage: the strategy the conversions follow).
- With none (no feedback, feedback on other things only, or every factor it shows already
  stated): one ``ADD`` to STRATEGIES of a GENERIC_STRATEGIES sentence the section lacks, reworded
  or not (drawn with the rng), or, when it has them all, an ``UPDATE`` of a rng-drawn STRATEGIES bullet that
  appends REWORD_SUFFIX to its content (or removes it when it ends with it). Neither changes any
  factor the task model reads.

>>> program = ("## CONVERSIONS\\n[conv-1] helpful=0 harmful=0 :: 1 mile = 1.609 km\\n## STRATEGIES\\n"
...            "[strat-1] helpful=0 harmful=0 :: Multiply the quantity by the factor.\\n")
>>> prompt = ("## Current program\\n```playbook\\n" + program + "```\\n## Feedback on the parent's cases\\n"
...           "[val-3] Expected 5.443 kg for 12 pound; the answer was: I do not know the factor.\\n"
...           "Answer format: diff\\n")
>>> print(playbook_edit_answer(prompt, program, random.Random(0)))
Simulated curator: the failed cases need factors the playbook lacks or states wrongly: 1 pound = 0.4536 kg.
<BLANKLINE>
```json
{"operations": [{"type": "ADD", "section": "CONVERSIONS", "content": "1 pound = 0.4536 kg"}, \
{"type": "TAG", "id": "strat-1", "tag": "helpful"}]}
```
<BLANKLINE>
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from decimal import Decimal

from evoforge.infra.artifacts.playbook import PLAYBOOK_FENCE
from evoforge.infra.edits import fence_code
from evoforge.infra.llm_sim.playbook_model import FACTOR_RE, unit_name
from evoforge.infra.prompt_format import extract_feedback

PLAYBOOK_LANGUAGE = PLAYBOOK_FENCE  # the fence of a playbook in a research prompt
MOTIVATION = "Simulated curator: "
CONVERSIONS, STRATEGIES = "CONVERSIONS", "STRATEGIES"
MAX_CONVERSIONS = 2
GENERIC_STRATEGIES = ("Check the units named in the question.",
                      "Write the result with exactly 3 decimals, then the unit.",
                      "Use a factor only for the exact pair of units it states.")
REWORD_SUFFIX = " (Always.)"
FEEDBACK_RE = re.compile(r"Expected (?P<answer>\d+(?:\.\d+)?) (?P<to>[a-z]+) for (?P<quantity>\d+(?:\.\d+)?) "
                         r"(?P<unit>[a-z]+)\b", re.I)
SECTION_RE = re.compile(r"^##\s+(?P<name>\S.*?)\s*$")
BULLET_RE = re.compile(r"^\[(?P<id>[^\]\s]+)\]\s+helpful=(?P<helpful>\d+)\s+harmful=(?P<harmful>\d+)\s+::\s?"
                       r"(?P<content>.*?)\s*$")

Pair = tuple[str, str]


@dataclass(frozen=True)
class Bullet:
    """One bullet of a playbook, with the section it is in ("" before any section line)."""

    id: str
    section: str
    helpful: int
    harmful: int
    content: str


@dataclass(frozen=True)
class Needed:
    """A factor the feedback shows: its pair as written, its value, and the Q of the line."""

    unit: str
    to: str
    factor: str
    quantity: Decimal

    @property
    def content(self) -> str:
        return f"1 {self.unit} = {self.factor} {self.to}"


def read_bullets(playbook: str) -> list[Bullet]:
    """The bullets of ``playbook`` in order (lines that are neither section nor bullet are skipped).

    >>> read_bullets("## A\\n[a-1] helpful=2 harmful=0 :: Be exact.\\nnoise\\n")
    [Bullet(id='a-1', section='A', helpful=2, harmful=0, content='Be exact.')]
    """
    section, bullets = "", []
    for line in playbook.splitlines():
        heading, bullet = SECTION_RE.match(line), BULLET_RE.match(line.strip())
        if heading is not None:
            section = heading.group("name")
        elif bullet is not None:
            bullets.append(Bullet(bullet.group("id"), section, int(bullet.group("helpful")),
                                  int(bullet.group("harmful")), bullet.group("content")))
    return bullets


def needed_factors(feedback: list[str]) -> dict[Pair, Needed]:
    """The factor each pair needs by the feedback lines (per pair, from the line with the largest Q).

    >>> needed_factors(["[val-1] Expected 30.480 cm for 12 inch; ...", "Expected 5 cm for 2 inch"])
    {('inch', 'cm'): Needed(unit='inch', to='cm', factor='2.54', quantity=Decimal('12'))}
    """
    found: dict[Pair, Needed] = {}
    for line in feedback:
        match = FEEDBACK_RE.search(line)
        quantity = Decimal(match.group("quantity")) if match else Decimal(0)
        if match is None or quantity <= 0:
            continue
        pair = (unit_name(match.group("unit")), unit_name(match.group("to")))
        if pair not in found or quantity > found[pair].quantity:
            factor = f"{float(match.group('answer')) / float(quantity):.4g}"
            found[pair] = Needed(match.group("unit"), match.group("to"), factor, quantity)
    return found


def playbook_edit_answer(prompt: str, program: str, rng: random.Random) -> str:
    """The simulated curator's answer for the ``program`` playbook quoted in the research ``prompt``."""
    bullets = read_bullets(program)
    operations = _conversion_operations(bullets, needed_factors(extract_feedback(prompt)), rng)
    if operations:
        why = ("the failed cases need factors the playbook lacks or states wrongly: "
               + "; ".join(op["content"] for op in operations) + ".")
        strategies = [b for b in bullets if b.section == STRATEGIES]
        if strategies and strategies[0].helpful == 0:
            operations.append({"type": "TAG", "id": strategies[0].id, "tag": "helpful"})
    else:
        operations, why = _generic_operation(bullets, rng)
    body = json.dumps({"operations": operations})
    return f"{MOTIVATION}{why}\n\n{fence_code(body, 'json')}"


def _conversion_operations(bullets: list[Bullet], needed: dict[Pair, Needed],
                           rng: random.Random) -> list[dict[str, str]]:
    """ADD or UPDATE operations for at most MAX_CONVERSIONS pairs whose factor is missing or wrong."""
    stated: dict[Pair, tuple[Bullet, str]] = {}
    for bullet in bullets:
        for match in FACTOR_RE.finditer(bullet.content):
            pair = (unit_name(match.group("unit")), unit_name(match.group("to")))
            stated.setdefault(pair, (bullet, match.group("factor")))
    todo = sorted(pair for pair, need in needed.items()
                  if pair not in stated or Decimal(stated[pair][1]) != Decimal(need.factor))
    chosen = rng.sample(todo, min(MAX_CONVERSIONS, len(todo)))
    operations = []
    for pair in chosen:
        content = needed[pair].content
        if pair in stated:
            operations.append({"type": "UPDATE", "id": stated[pair][0].id, "content": content})
        else:
            operations.append({"type": "ADD", "section": CONVERSIONS, "content": content})
    return operations


def _generic_operation(bullets: list[Bullet], rng: random.Random) -> tuple[list[dict[str, str]], str]:
    """One harmless operation on STRATEGIES, and why."""
    strategies = [b for b in bullets if b.section == STRATEGIES]
    present = {b.content.removesuffix(REWORD_SUFFIX) for b in strategies}  # a reworded one is there
    missing = [s for s in GENERIC_STRATEGIES if s not in present]
    why = "no feedback shows a factor the playbook lacks, so "
    if missing:
        operation = {"type": "ADD", "section": STRATEGIES, "content": rng.choice(missing)}
        return [operation], why + "it gains a general strategy."
    bullet = rng.choice(strategies)
    content = (bullet.content.removesuffix(REWORD_SUFFIX) if bullet.content.endswith(REWORD_SUFFIX)
               else bullet.content + REWORD_SUFFIX)
    return [{"type": "UPDATE", "id": bullet.id, "content": content}], why + "a strategy is reworded."
