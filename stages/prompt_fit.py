"""Prompts that fit the model's context window: a prompt is built from named parts, each with a
drop rank, and `fit` leaves out the least needed parts until the prompt and the answer fit.

The budget is the endpoint's context window minus `llm.max_tokens` (room for the answer) minus a
small margin for the chat template. Parts leave in this order, the last of a rank first:

1. rejected proposals and old lessons (REJECTED)
2. inspirations, the last one first (INSPIRATION)
3. cognition items, the last one first (COGNITION)
4. the feedback on the parent's cases (FEEDBACK)
5. the analysis of the parent (ANALYSIS)
6. the metrics detail (METRICS)

The task, the answer rules and the parent (KEEP) are never dropped: when they alone do not fit,
`fit` raises PromptTooLarge. A part may offer a shorter text, tried before it is dropped (it is
then named with " (shortened)"); a KEEP part's shorter text is tried last of all, and it is never
dropped. When the window is unknown (None) nothing is dropped.

    >>> parts = [Part("task", "t" * 30), Part("inspiration 1", "i" * 300, INSPIRATION)]
    >>> fitted = fit(parts, window=200, max_tokens=100, count=lambda ms: sum(len(m["content"]) for m in ms))
    >>> fitted.dropped, fitted.messages
    (['inspiration 1'], [{'role': 'user', 'content': 'tttttttttttttttttttttttttttttt'}])
    >>> fit(parts, None, 100, len).dropped
    []
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from evoforge.infra.llm.spending import prompt_tokens

KEEP, METRICS, ANALYSIS, FEEDBACK, COGNITION, INSPIRATION, REJECTED = range(7)
MARGIN = 32  # tokens kept free for the chat template's own markers
SHORTENED = " (shortened)"

Messages = list[dict[str, str]]
Counter = Callable[[Messages], int]


@dataclass(frozen=True)
class Part:
    """One named piece of a prompt: its text, its drop rank (KEEP: never dropped), its role, an
    optional shorter text, and the name prefix of the parts it only makes sense with."""

    name: str
    text: str
    drop: int = KEEP
    role: str = "user"
    short: str = ""
    requires: str = ""  # kept only while a part whose name starts with this is kept


@dataclass(frozen=True)
class Fitted:
    """The messages that fit, and the names of the parts dropped or shortened, in that order."""

    messages: Messages
    dropped: list[str]


class PromptTooLarge(ValueError):
    """The parts that are never dropped do not fit the window minus the answer's room."""

    def __init__(self, needed: int, window: int, max_tokens: int) -> None:
        super().__init__(f"the prompt's fixed parts (task, answer rules, parent: {needed} tokens) do "
                         f"not fit the context window ({window}) minus llm.max_tokens ({max_tokens}) "
                         f"minus a margin of {MARGIN}: lower llm.max_tokens or use a model with a "
                         f"larger context")
        self.needed, self.window, self.max_tokens = needed, window, max_tokens


def messages_of(parts: Sequence[Part]) -> Messages:
    """The chat messages of `parts`: consecutive parts of one role joined by newlines."""
    messages: Messages = []
    for part in parts:
        if messages and messages[-1]["role"] == part.role:
            messages[-1]["content"] += "\n" + part.text
        else:
            messages.append({"role": part.role, "content": part.text})
    return messages


def fit(parts: Sequence[Part], window: int | None, max_tokens: int, count: Counter,
        margin: int = MARGIN, strict: bool = True) -> Fitted:
    """The messages of `parts` that fit `window - max_tokens - margin` tokens (by `count`), dropping
    parts of the highest rank first (the last of a rank first); when even the parts ranked KEEP do
    not fit, PromptTooLarge (`strict`) or those parts alone (the server's refusal then says it);
    nothing dropped when `window` is None."""
    kept = list(parts)
    if window is None:
        return Fitted(messages_of(_present(kept)), [])
    budget = window - max_tokens - margin
    ranked = sorted((-p.drop, -i) for i, p in enumerate(kept) if p.drop != KEEP)
    victims = [kept[-i] for _, i in ranked] + [p for p in kept if p.drop == KEEP and p.short]
    dropped: list[str] = []
    while True:
        messages = messages_of(_present(kept))
        needed = count(messages)
        if needed <= budget:
            return Fitted(messages, dropped)
        if not victims:
            if strict:
                raise PromptTooLarge(needed, window, max_tokens)
            return Fitted(messages, dropped)
        victim = victims.pop(0)
        at = next(i for i, p in enumerate(kept) if p is victim)
        if victim.short:
            kept[at] = replace(victim, text=victim.short, short="")
            if victim.drop != KEEP:
                victims.insert(0, kept[at])
            dropped.append(victim.name + SHORTENED)
        else:
            del kept[at]
            name = victim.name.removesuffix(SHORTENED)
            dropped = [d for d in dropped if d != name + SHORTENED] + [name]


def _present(parts: list[Part]) -> list[Part]:
    """The parts whose `requires` is met by another part still there."""
    return [p for p in parts
            if not p.requires or any(o.name.startswith(p.requires) for o in parts if o is not p)]


def window_of(llm: object) -> tuple[int | None, Counter]:
    """The endpoint's context window (None: unknown) and its token counter (a generous estimate
    when it has none)."""
    window = getattr(llm, "context_window", None)
    count = getattr(llm, "count_tokens", None)
    return (window if isinstance(window, int) and window > 0 else None), (count or prompt_tokens)


def fit_to(llm: object, parts: Sequence[Part], max_tokens: int, strict: bool = True) -> Fitted:
    """`parts` fitted to `llm`'s context window with `max_tokens` of room for the answer."""
    window, count = window_of(llm)
    return fit(parts, window, max_tokens, count, strict=strict)
