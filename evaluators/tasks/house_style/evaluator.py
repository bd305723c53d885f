"""House style: arithmetic questions answered by a task model whose prompt is evolved.

Each case is a question such as "What is 17 + 25?" with its exact answer and the house rules it
checks (2 to 4 of the five in RULES, drawn with a fixed seed). The answer is the first non-empty
line of the output. A case's score is the fraction of its checks passed: the answer is correct
(the only number in it, in digits or in words, is the right one) and each of its rules holds:

- ``prefix``: the answer starts with "Answer:".
- ``digits``: the number is written in digits and no number is written in words.
- ``lowercase``: no capital letter after the "Answer:" prefix.
- ``brief``: at most MAX_WORDS words, not counting the "Answer:" prefix.
- ``full_stop``: the answer ends with a full stop.

feedback() writes one fixed sentence (PHRASES) per failed check, so a proposer can learn the rules.

>>> case = {"id": "val-0", "question": "What is 17 + 25?", "answer": 42, "rules": list(RULES)}
>>> metric(case, "Answer: 42.\\n(anything after the first line is ignored)")
1.0
>>> round(metric(case, "The result is forty-two, I believe!"), 3)
0.167
>>> print(feedback(case, "Answer: Forty-two.", 0.67))
The number must be written in digits, not words.
The answer must use only lowercase letters after the 'Answer:' prefix.
"""

import random
import re

SEED = 19
SPLITS = {"train": 120, "val": 40, "test": 60}
RULES = ("prefix", "digits", "lowercase", "brief", "full_stop")
MAX_WORDS = 3
PREFIX = "Answer:"
PHRASES = {  # the fixed feedback sentence of each check
    "correct": "The answer must give the correct number.",
    "prefix": "The answer must start with 'Answer:'.",
    "digits": "The number must be written in digits, not words.",
    "lowercase": "The answer must use only lowercase letters after the 'Answer:' prefix.",
    "brief": f"The answer must be at most {MAX_WORDS} words long, not counting 'Answer:'.",
    "full_stop": "The answer must end with a full stop.",
}
_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_VALUES = {**{w: i for i, w in enumerate(_ONES)}, **{w: 20 + 10 * i for i, w in enumerate(_TENS)}}
_WORD = "|".join(sorted([*_VALUES, "hundred"], key=len, reverse=True))
_PHRASE_RE = re.compile(rf"\b(?:{_WORD})(?:[\s-]+(?:{_WORD}))*\b", re.I)
_TEMPLATES = {
    "+": ("What is {a} + {b}?", "What is {a} plus {b}?"),
    "-": ("What is {a} minus {b}?", "What is {a} - {b}?"),
    "*": ("What is {a} times {b}?", "What is {a} multiplied by {b}?"),
}


def cases() -> dict[str, list[dict]]:
    """The train, val and test cases, the same on every call (seeded with SEED)."""
    rng = random.Random(SEED)
    return {split: [_case(f"{split}-{i}", rng) for i in range(size)] for split, size in SPLITS.items()}


async def run(prompt: str, case: dict, llm) -> str:
    """The task model's output for the case, with ``prompt`` as its system message."""
    messages = [{"role": "system", "content": prompt},
                {"role": "user", "content": f"Question: {case['question']}"}]
    return await llm(messages)


def metric(case: dict, output: str) -> float:
    """The fraction of the case's checks (correctness and its rules) that the answer passes."""
    checks = _checks(case, output)
    return sum(checks.values()) / len(checks)


def feedback(case: dict, output: str, score: float) -> str:
    """One fixed sentence per failed check ("" when every check passes)."""
    return "\n".join(PHRASES[name] for name, passed in _checks(case, output).items() if not passed)


def _case(case_id: str, rng: random.Random) -> dict:
    op = rng.choice(sorted(_TEMPLATES))
    if op == "+":
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        answer = a + b
    elif op == "-":
        a = rng.randint(20, 99)
        b = rng.randint(1, a)
        answer = a - b
    else:
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        answer = a * b
    question = rng.choice(_TEMPLATES[op]).format(a=a, b=b)
    chosen = set(rng.sample(RULES, rng.randint(2, 4)))
    return {"id": case_id, "question": question, "answer": answer, "rules": [r for r in RULES if r in chosen]}


def _checks(case: dict, output: str) -> dict[str, bool]:
    """Each check's outcome on the answer (the first non-empty line), correctness first."""
    line = next((ln.strip() for ln in output.splitlines() if ln.strip()), "")
    rest = line[len(PREFIX):].strip() if line.startswith(PREFIX) else line
    numbers = _numbers(rest)
    outcome = {
        "prefix": line.startswith(PREFIX),
        "digits": bool(re.search(r"\d", rest)) and not _PHRASE_RE.search(rest),
        "lowercase": rest == rest.lower(),
        "brief": len(rest.split()) <= MAX_WORDS,
        "full_stop": line.endswith("."),
    }
    return {"correct": numbers == [case["answer"]], **{rule: outcome[rule] for rule in case["rules"]}}


def _numbers(text: str) -> list[int]:
    """The numbers in ``text``, in digits or in words ("one hundred forty-two"), in order."""
    found = [(m.start(), int(m.group())) for m in re.finditer(r"\d+", text)]
    for match in _PHRASE_RE.finditer(text):
        value = 0
        for word in re.split(r"[\s-]+", match.group().lower()):
            value = max(value, 1) * 100 if word == "hundred" else value + _VALUES[word]
        found.append((match.start(), value))
    return [value for _, value in sorted(found)]
