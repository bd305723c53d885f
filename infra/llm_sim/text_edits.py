"""The simulator as a proposer for a text artifact: it adds one instruction the feedback asks for.

A research prompt whose program section is fenced ``prompt`` carries a prompt under evolution,
and perhaps a feedback section (prompt_format.FEEDBACK_HEADER: one line per failed case, maybe
prefixed by its id, as ``[val-3] The answer must start with 'Answer:'.``). The answer is a
motivation line starting with MOTIVATION, then one edit in the form the prompt asks for: a
SEARCH/REPLACE block that appends a sentence to the prompt's last non-empty line (diff), or the
whole new prompt in one ``text`` fenced block (rewrite).

The sentence: the rng picks one house rule that the feedback names (by the phrases in RULE_PHRASES,
case-insensitively) and that the prompt does not state yet (task_model.read_style), and the answer
adds that rule's instruction (RULE_SENTENCES; "at most N words" keeps the N of the feedback). The
task model recognises every such sentence. Without such a rule (no feedback, feedback on other
things only, or every named rule already stated) it adds one of GENERIC_SENTENCES the prompt lacks,
or, when it has them all, "Take your time." -- harmless to every house rule.

>>> prompt = ("Improve it.\\n## Current program\\n```prompt\\nYou answer questions.\\n```\\n"
...           "## Feedback on the parent's cases\\n[val-1] The answer must end with a full stop.\\n"
...           "Answer format: rewrite\\n")
>>> print(text_edit_answer(prompt, "You answer questions.\\n", random.Random(0)))
Simulated proposer: the feedback says "end with a full stop", so the prompt now states that rule.
<BLANKLINE>
```text
You answer questions. End the answer with a full stop.
```
<BLANKLINE>
"""

from __future__ import annotations

import random
import re

from evoforge.infra.artifacts.text import TEXT_FENCE
from evoforge.infra.edits import SearchReplace, fence_code, render_diff
from evoforge.infra.llm_sim.task_model import Style, read_style
from evoforge.infra.prompt_format import FORMAT_REWRITE, extract_feedback, requested_format

TEXT_LANGUAGE = TEXT_FENCE  # the fence of a text artifact's program section
MOTIVATION = "Simulated proposer: "
RULE_PHRASES = {  # feedback phrase (a regex, case-insensitive) -> the rule it names
    r"start with 'answer:'": "prefix",
    r"written in digits": "digits",
    r"lowercase letters": "lowercase",
    r"at most \d+ words": "brief",
    r"end with a full stop": "full_stop",
}
RULE_SENTENCES = {  # rule -> the instruction added for it ({n}: the word limit the feedback names)
    "prefix": "Start every answer with 'Answer:'.",
    "digits": "Write numbers in digits, not words.",
    "lowercase": "Write the answer in lowercase letters.",
    "brief": "Keep the answer to at most {n} words, not counting 'Answer:'.",
    "full_stop": "End the answer with a full stop.",
}
GENERIC_SENTENCES = ("Read the question carefully.", "Be accurate.", "Think before you answer.")
FALLBACK_SENTENCE = "Take your time."


def text_edit_answer(prompt: str, program: str, rng: random.Random) -> str:
    """The simulated proposer's answer for the text ``program`` quoted in the research ``prompt``."""
    style = read_style(program)
    unmet = {rule: (phrase, n) for rule, (phrase, n) in _named_rules(extract_feedback(prompt)).items()
             if not _states(style, rule, n)}
    if unmet:
        rule = rng.choice(sorted(unmet))
        phrase, n = unmet[rule]
        sentence = RULE_SENTENCES[rule].format(n=n)
        why = f'the feedback says "{phrase}", so the prompt now states that rule.'
    else:
        missing = [s for s in GENERIC_SENTENCES if s not in program]
        sentence = rng.choice(missing) if missing else FALLBACK_SENTENCE
        why = "no feedback names a rule the prompt lacks, so it gets a general reminder."
    motivation = MOTIVATION + why
    if requested_format(prompt) == FORMAT_REWRITE or not program.strip():  # empty: nothing to SEARCH
        return f"{motivation}\n\n{fence_code(_appended(program, sentence), 'text')}"
    return f"{motivation}\n\n{render_diff([_append_block(program, sentence)])}"


def _named_rules(lines: list[str]) -> dict[str, tuple[str, int]]:
    """The rules the feedback lines name: rule -> (the phrase as written, the word limit or 0)."""
    named: dict[str, tuple[str, int]] = {}
    for line in lines:
        for pattern, rule in RULE_PHRASES.items():
            match = re.search(pattern, line, re.I)
            if match and rule not in named:
                limit = re.search(r"\d+", match.group())
                named[rule] = (match.group(), int(limit.group()) if limit else 0)
    return named


def _states(style: Style, rule: str, n: int) -> bool:
    """True when the prompt already states ``rule`` (for ``brief``: a limit of at most ``n``)."""
    if rule == "brief":
        return style.max_words is not None and style.max_words <= n
    return bool(getattr(style, rule))


def _append_block(program: str, sentence: str) -> SearchReplace:
    """A block appending ``sentence`` to the last non-empty line; its SEARCH (that line, with
    the lines before it when the line alone is not unique) matches one place only."""
    lines = program.rstrip("\n").splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip())
    start = last
    while start > 0 and _count_windows(lines, lines[start:last + 1]) > 1:
        start -= 1
    window = lines[start:last + 1]
    replaced = [*window[:-1], f"{window[-1].rstrip()} {sentence}"]
    return SearchReplace("\n".join(window) + "\n", "\n".join(replaced) + "\n")


def _appended(program: str, sentence: str) -> str:
    """``program`` with ``sentence`` appended to its last non-empty line."""
    lines = program.rstrip("\n").splitlines() or [""]
    return "\n".join([*lines[:-1], f"{lines[-1].rstrip()} {sentence}".strip()]) + "\n"


def _count_windows(lines: list[str], window: list[str]) -> int:
    size = len(window)
    return sum(lines[i:i + size] == window for i in range(len(lines) - size + 1))
