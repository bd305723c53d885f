"""The simulator as a task model: a deterministic answer that follows only the rules its prompt states.

A chat request that is none of evoforge's own prompts (no research program section, no analysis,
judge, plan or reflection marker) is a task-model call: the system message is the prompt under
evolution and the last user message is the question. The answer depends on those two texts only.

The question: the first ``A + B``, ``A plus B``, ``A - B``, ``A minus B``, ``A times B``,
``A x B``, ``A * B`` or ``A multiplied by B`` (whole numbers A and B) in the user message is
computed; the answer to anything else is "I do not know". The number is written in words
(``forty-two``) unless the system message asks for digits.

The style, by default "The result is forty-two, I believe!" (sentence case, one exclamation
mark), changes only where the system message states a rule, recognised case-insensitively by:

- ``prefix`` -- "start" or "begin" and, later in the same sentence, "Answer:": the line starts
  with "Answer: ".
- ``digits`` -- the word "digits" or "numerals": the number is written in digits.
- ``lowercase`` -- "lowercase" (or "lower case", "lower-case"): everything after the prefix is
  lower case.
- ``brief`` -- "at most N words", "no more than N words" or "up to N words" (N in digits or one
  to ten; the smallest N stated wins): the bare number, cut to N words when longer.
- ``full_stop`` -- "full stop" or "period": the line ends with "." instead of "!".

It reads keywords, not meaning ("never use lowercase" asks for lowercase, too). The answer is the
first line; the second is always SIMULATED_LINE, so the text cannot pass for a real LLM's.

A conversion question ("Convert 12 pounds to kg.") is answered instead from the factors the
system message (a playbook) states, as playbook_model.py describes; the style rules do not apply.
So is a classification call (a ``Text:`` line to label, with ``Example:`` or ``Labels:`` lines),
from the examples the messages give, as classify_model.py describes.

>>> print(task_model_answer("You are a helpful assistant.", "Question: What is 17 + 25?"))
The result is forty-two, I believe!
(simulated task model: evoforge llm-sim, no real LLM)
>>> task_model_answer("Start every answer with 'Answer:'. Use digits. End with a full stop. "
...                   "Write in lowercase, at most 3 words.", "What is 9 times 7?").splitlines()[0]
'Answer: 63.'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evoforge.infra.ace_format import is_reflector_prompt
from evoforge.infra.llm_sim.classify_model import classification_line
from evoforge.infra.llm_sim.playbook_model import conversion_line
from evoforge.infra.prompt_format import (
    extract_program,
    is_analysis_prompt,
    is_judge_prompt,
    is_plan_prompt,
    is_reflection_prompt,
)

SIMULATED_LINE = "(simulated task model: evoforge llm-sim, no real LLM)"
UNKNOWN = "I do not know"

_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_QUESTION_RE = re.compile(r"(\d+)\s*(\+|-|\*|x|×|plus|minus|times|multiplied by)\s*(\d+)", re.I)
_OPS = {"+": int.__add__, "plus": int.__add__, "-": int.__sub__, "minus": int.__sub__}
_PREFIX_RE = re.compile(r"\b(?:start|begin)\w*\b[^.\n]*?answer:", re.I)
_DIGITS_RE = re.compile(r"\b(?:digits|numerals)\b", re.I)
_LOWER_RE = re.compile(r"\blower[- ]?case\b", re.I)
_WORDS_RE = re.compile(r"\b(?:at most|no more than|up to)\s+(\d+|[a-z]+)\s+words?\b", re.I)
_STOP_RE = re.compile(r"\bfull stop\b|\bperiod\b", re.I)


@dataclass(frozen=True)
class Style:
    """The house rules a system message states (``max_words`` None: no word limit)."""

    prefix: bool = False
    digits: bool = False
    lowercase: bool = False
    max_words: int | None = None
    full_stop: bool = False


def read_style(system: str) -> Style:
    """The rules ``system`` states, by the keywords in the module docstring.

    >>> read_style("Be terse: no more than two words, lower-case.")
    Style(prefix=False, digits=False, lowercase=True, max_words=2, full_stop=False)
    """
    limits = [_count(m.group(1)) for m in _WORDS_RE.finditer(system)]
    limits = [n for n in limits if n is not None]
    return Style(prefix=bool(_PREFIX_RE.search(system)), digits=bool(_DIGITS_RE.search(system)),
                 lowercase=bool(_LOWER_RE.search(system)), max_words=min(limits) if limits else None,
                 full_stop=bool(_STOP_RE.search(system)))


def is_task_model_call(prompt: str) -> bool:
    """True for a user message that is none of evoforge's own prompts (a task model's turn)."""
    own = (is_analysis_prompt, is_judge_prompt, is_plan_prompt, is_reflection_prompt, is_reflector_prompt)
    return extract_program(prompt) is None and not any(detect(prompt) for detect in own)


def solve(question: str) -> int | None:
    """The value of the first arithmetic question in ``question``, or None when there is none.

    >>> solve("What is 63 minus 18?"), solve("What is 6 multiplied by 12?"), solve("Why?")
    (45, 72, None)
    """
    match = _QUESTION_RE.search(question)
    if match is None:
        return None
    a, op, b = int(match.group(1)), match.group(2).lower(), int(match.group(3))
    return _OPS.get(op, int.__mul__)(a, b)


def number_words(n: int) -> str:
    """``n`` in English words (0 to 999; larger or negative numbers in digits).

    >>> number_words(42), number_words(144), number_words(7)
    ('forty-two', 'one hundred forty-four', 'seven')
    """
    if not 0 <= n <= 999:
        return str(n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10 - 2] + (f"-{_ONES[n % 10]}" if n % 10 else "")
    return f"{_ONES[n // 100]} hundred" + (f" {number_words(n % 100)}" if n % 100 else "")


def task_model_answer(system: str, user: str) -> str:
    """The answer line to ``user`` in the style ``system`` states (a conversion question: from
    the factors it states; a classification call: from the examples given), then SIMULATED_LINE."""
    converted = conversion_line(system, user)
    if converted is None:
        converted = classification_line(system, user)
    if converted is not None:
        return f"{converted}\n{SIMULATED_LINE}"
    style, value = read_style(system), solve(user)
    if value is None:
        body = UNKNOWN
    else:
        number = str(value) if style.digits else number_words(value)
        body = number if style.max_words is not None else f"The result is {number}, I believe"
    body = body.lower() if style.lowercase else body[:1].upper() + body[1:]
    if style.max_words is not None:
        body = " ".join(body.split()[: style.max_words])
    line = body + ("." if style.full_stop else "!")
    if style.prefix:
        line = f"Answer: {line}"
    return f"{line}\n{SIMULATED_LINE}"


def _count(text: str) -> int | None:
    """A word limit written in digits or as one to ten (at least 1), or None."""
    words = _ONES[1:11]
    n = int(text) if text.isdigit() else words.index(text.lower()) + 1 if text.lower() in words else None
    return None if n is None else max(n, 1)
