"""The simulator as a task model for a classifier: it labels a text by the nearest example its prompt gives.

A task-model call (task_model.py) is a classification call when its last user message has a line
``Text: <text>`` and its system and last user messages state at least one line
``Example: <text> => <label>`` or ``Labels: <label>, <label>, ...`` (each keyword at the start of
its line, any case). The answer depends on those two messages only:

- **Labels known**: those of the ``Labels:`` line in their order, then those of the examples not
  listed there, in the order they first appear.
- **Prediction**: the label of the example whose words share the most with the text's (a word is
  a run of three or more letters, lower-cased; on a tie the example stated first wins); none when
  no example shares a word with the text (no examples: none either).
- **Answer line**: with no prediction, ``I cannot tell what this text is about.``; when the
  messages say ``label only`` or ``only the label`` (any case), the label alone; when the
  nearest example shares two words or more, ``I would say <label>.``; when it shares one (a
  hedge), ``It could be <other>, but I would say <label>.``, where ``<other>`` is the label known
  just before ``<label>`` (the last one before the first; with one label known, no hedge).

So a harness scores better by showing more (and closer) examples, sending the whole text, asking
for the label alone, and reading the label the answer *settles on*, not the first one it names.
task_model.py adds its simulated marker line after the answer line.

>>> system = "Labels: sports, music\\nExample: goal match referee => sports\\nExample: violin tempo => music"
>>> classification_line(system, "Text: the referee ended the match")
'I would say sports.'
>>> classification_line(system, "Text: a long match")
'It could be music, but I would say sports.'
>>> classification_line(system + "\\nReply with the label only.", "Text: a slow tempo")
'music'
>>> classification_line(system, "Text: nothing in common")
'I cannot tell what this text is about.'
>>> classification_line("", "What is 2 + 2?") is None
True
"""

from __future__ import annotations

import re

UNSURE = "I cannot tell what this text is about."
_TEXT_RE = re.compile(r"^\s*text:\s*(?P<text>.*)$", re.I | re.M)
_EXAMPLE_RE = re.compile(r"^\s*example:\s*(?P<text>.*?)\s*=>\s*(?P<label>\S.*?)\s*$", re.I | re.M)
_LABELS_RE = re.compile(r"^\s*labels:\s*(?P<labels>.+?)\s*$", re.I | re.M)
_LABEL_ONLY_RE = re.compile(r"\blabel only\b|\bonly the label\b", re.I)
_WORD_RE = re.compile(r"[a-z]{3,}")


def words(text: str) -> set[str]:
    """The words of ``text`` the simulator compares: runs of three or more letters, lower-cased.

    >>> sorted(words("The REF blew: 2 goals!"))
    ['blew', 'goals', 'ref', 'the']
    """
    return set(_WORD_RE.findall(text.lower()))


def classification_line(system: str, user: str) -> str | None:
    """The answer line to a classification call (module doc), or None when it is not one."""
    found = list(_TEXT_RE.finditer(user))
    stated = f"{system}\n{user}"
    examples = [(m.group("text"), m.group("label")) for m in _EXAMPLE_RE.finditer(stated)]
    listed = [label.strip() for m in _LABELS_RE.finditer(stated) for label in m.group("labels").split(",")]
    if not found or not (examples or listed):
        return None
    labels = list(dict.fromkeys([label for label in listed if label] + [label for _, label in examples]))
    text = words(found[-1].group("text"))
    best, label = 0, None
    for example, example_label in examples:
        shared = len(text & words(example))
        if shared > best:
            best, label = shared, example_label
    if label is None:
        return UNSURE
    if _LABEL_ONLY_RE.search(stated):
        return label
    if best >= 2 or len(labels) < 2:
        return f"I would say {label}."
    other = labels[labels.index(label) - 1]
    return f"It could be {other}, but I would say {label}."
