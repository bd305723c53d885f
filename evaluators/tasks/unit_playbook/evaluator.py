"""Unit playbook: unit-conversion questions answered by a task model whose playbook is evolved.

Each case asks to convert a whole quantity (MIN_QUANTITY to MAX_QUANTITY) of one unit into
another, over the eight PAIRS, e.g. "Convert 12 pounds to kg."; its answer is the quantity
times the pair's factor, rounded half up to 3 decimals (computed in decimal, so it is exact).
Each split holds every pair equally often (as near as its size allows), in a seeded order.

The answer is the first non-empty line of the output. A case scores 1.0 when a number written in
that line is the expected result with exactly 3 decimals ("5.443"), else 0.0. feedback() is ""
for a right answer, else one line of the fixed form FEEDBACK (``from`` is the singular unit name,
``to`` the target unit as the question writes it; ``(empty)`` for an empty output)::

    Expected <answer, 3 decimals> <to> for <quantity> <from>; the answer was: <first line>

The quantities start at 11 so that answer / quantity gives the factor to 4 significant digits.

>>> case = {"id": "val-0", "question": "Convert 12 pounds to kg.", "quantity": 12, "from": "pound",
...         "to": "kg", "answer": 5.443}
>>> metric(case, "5.443 kg\\n(anything after the first line is ignored)"), metric(case, "5.4432 kg")
(1.0, 0.0)
>>> print(feedback(case, "I do not know the factor from pounds to kg.", 0.0))
Expected 5.443 kg for 12 pound; the answer was: I do not know the factor from pounds to kg.
"""

import random
import re
from decimal import ROUND_HALF_UP, Decimal

SEED = 23
SPLITS = {"train": 120, "val": 40, "test": 60}
MIN_QUANTITY, MAX_QUANTITY = 11, 500
PAIRS = (  # (from, its plural as the question writes it, to as the question writes it, exact factor)
    ("mile", "miles", "km", "1.609"),
    ("pound", "pounds", "kg", "0.4536"),
    ("inch", "inches", "cm", "2.54"),
    ("gallon", "gallons", "litres", "3.785"),
    ("ounce", "ounces", "grams", "28.35"),
    ("foot", "feet", "metres", "0.3048"),
    ("yard", "yards", "metres", "0.9144"),
    ("acre", "acres", "hectares", "0.4047"),
)
FEEDBACK = "Expected {answer} {to} for {quantity} {unit}; the answer was: {line}"
_NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")


def cases() -> dict[str, list[dict]]:
    """The train, val and test cases, the same on every call (seeded with SEED)."""
    rng = random.Random(SEED)
    out: dict[str, list[dict]] = {}
    for split, size in SPLITS.items():
        pairs = list(PAIRS) * -(-size // len(PAIRS))
        rng.shuffle(pairs)
        out[split] = [_case(f"{split}-{i}", pair, rng.randint(MIN_QUANTITY, MAX_QUANTITY))
                      for i, pair in enumerate(pairs[:size])]
    return out


async def run(playbook: str, case: dict, llm) -> str:
    """The task model's output for the case, with ``playbook`` as its system message."""
    messages = [{"role": "system", "content": playbook},
                {"role": "user", "content": f"Question: {case['question']}"}]
    return await llm(messages)


def metric(case: dict, output: str) -> float:
    """1.0 when the answer line writes the expected result with 3 decimals, else 0.0."""
    return 1.0 if f"{case['answer']:.3f}" in _NUMBER_RE.findall(_answer_line(output)) else 0.0


def feedback(case: dict, output: str, score: float) -> str:
    """"" for a right answer, else the one line of the form FEEDBACK."""
    if metric(case, output) == 1.0:
        return ""
    return FEEDBACK.format(answer=f"{case['answer']:.3f}", to=case["to"], quantity=case["quantity"],
                           unit=case["from"], line=_answer_line(output) or "(empty)")


def _case(case_id: str, pair: tuple[str, str, str, str], quantity: int) -> dict:
    unit, plural, to, factor = pair
    exact = (Decimal(factor) * quantity).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)
    return {"id": case_id, "question": f"Convert {quantity} {plural} to {to}.", "quantity": quantity,
            "from": unit, "to": to, "answer": float(exact)}


def _answer_line(output: str) -> str:
    """The first non-empty line of ``output``, stripped ("" when there is none)."""
    return next((line.strip() for line in output.splitlines() if line.strip()), "")
