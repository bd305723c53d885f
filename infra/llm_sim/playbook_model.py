"""The simulator as a task model for a playbook: it converts units with the factors the playbook states.

A task-model call (task_model.py) whose user message asks a conversion question is answered here,
from the system message (the playbook) and that question only. The question is the first match
of QUESTION_RE, case-insensitively: "Convert <quantity> <unit> to <unit>" ("into" also reads).
A factor is any match of FACTOR_RE in the system message, "1 <unit> = <factor> <unit>" (the "1"
not preceded by a letter, digit, "." or "=", so "helpful=1" is no factor); the first one stated
for a unit pair wins, and only in its own direction. Units compare by unit_name(): lower case,
plural to singular ("feet", "inches", a trailing "s") and a few spellings in UNIT_ALIASES.

The answer line is "<quantity x factor, rounded half up to 3 decimals> <to unit as asked>", or,
without a factor for the pair, "I do not know the factor from <unit> to <unit>." (units as asked).
task_model.py adds its simulated marker line after it.

>>> playbook = "## CONVERSIONS\\n[conv-1] helpful=1 harmful=0 :: 1 mile = 1.609 km\\n"
>>> conversion_line(playbook, "Question: Convert 12 miles to km.")
'19.308 km'
>>> conversion_line(playbook, "Question: Convert 12 pounds to kg.")
'I do not know the factor from pounds to kg.'
>>> conversion_line(playbook, "Question: What is 17 + 25?") is None
True
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal

QUESTION_RE = re.compile(r"\bconvert\s+(?P<quantity>\d+(?:\.\d+)?)\s+(?P<unit>[a-z]+)\s+(?:to|into)\s+"
                         r"(?P<to>[a-z]+)", re.I)
FACTOR_RE = re.compile(r"(?<![\w.=])1\s+(?P<unit>[a-z]+)\s*=\s*(?P<factor>\d+(?:\.\d+)?)\s*(?P<to>[a-z]+)",
                       re.I)
IRREGULAR = {"feet": "foot", "inches": "inch"}
UNIT_ALIASES = {"meter": "metre", "liter": "litre", "kilometre": "km", "kilometer": "km", "kilogram": "kg",
                "centimetre": "cm", "centimeter": "cm", "lb": "pound", "oz": "ounce", "ft": "foot",
                "yd": "yard", "l": "litre", "g": "gram", "m": "metre", "ha": "hectare"}
_THOUSANDTH = Decimal("0.001")


def unit_name(word: str) -> str:
    """The unit a word names, singular and in one spelling.

    >>> [unit_name(w) for w in ("Feet", "inches", "litres", "kilometers", "kg", "lbs")]
    ['foot', 'inch', 'litre', 'km', 'kg', 'pound']
    """
    word = word.lower()
    word = IRREGULAR.get(word, word[:-1] if len(word) > 2 and word.endswith("s") else word)
    return UNIT_ALIASES.get(word, word)


def stated_factors(text: str) -> dict[tuple[str, str], str]:
    """The factor ``text`` states for each (from, to) unit pair, by unit_name(); the first wins.

    >>> stated_factors("1 mile = 1.609 km. 1 Pound = 0.4536 kilograms; 1 mile = 2 km")
    {('mile', 'km'): '1.609', ('pound', 'kg'): '0.4536'}
    """
    found: dict[tuple[str, str], str] = {}
    for match in FACTOR_RE.finditer(text):
        pair = (unit_name(match.group("unit")), unit_name(match.group("to")))
        found.setdefault(pair, match.group("factor"))
    return found


def conversion_line(system: str, user: str) -> str | None:
    """The answer line to the conversion question in ``user`` under the playbook ``system``, or
    None when ``user`` asks none."""
    question = QUESTION_RE.search(user)
    if question is None:
        return None
    unit, to = question.group("unit"), question.group("to")
    factor = stated_factors(system).get((unit_name(unit), unit_name(to)))
    if factor is None:
        return f"I do not know the factor from {unit} to {to}."
    value = (Decimal(question.group("quantity")) * Decimal(factor)).quantize(_THOUSANDTH, ROUND_HALF_UP)
    return f"{value} {to}"
