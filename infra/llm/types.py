"""The one interface every LLM backend implements: chat messages in, a Completion out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from evoforge.infra.failure_reasons import SERVER_ERROR


@dataclass(frozen=True)
class Completion:
    """One answer from a backend, with what it cost."""

    text: str
    model: str
    backend: str  # "openai" (any OpenAI-compatible server) or "offline"
    tokens_in: int
    tokens_out: int
    seconds: float
    attempts: int = 1
    truncated_retries: int = 0  # 1: the first answer was cut off at max_tokens and asked again with more room
    cached_tokens: int = 0  # prompt tokens the server's prefix cache held (usage.prompt_tokens_details)
    cut_off: bool = False  # cut off at max_tokens and kept as it is (within `cut_answers_kept()`)


_CUT_KEPT: ContextVar[bool] = ContextVar("evoforge_cut_answers_kept", default=False)


@contextmanager
def cut_answers_kept() -> Iterator[None]:
    """Within it, an answer cut off at max_tokens is the answer (a Completion with `cut_off`), not
    retried with more room nor an error: a task model's rambling is its prompt's answer."""
    token = _CUT_KEPT.set(True)
    try:
        yield
    finally:
        _CUT_KEPT.reset(token)


def cut_answers_are_kept() -> bool:
    """Whether the call being made keeps an answer cut off at max_tokens (`cut_answers_kept`)."""
    return _CUT_KEPT.get()


class LLMError(RuntimeError):
    """A request that failed after its retries; the message is recorded on the node, `model`
    names the model the call went to when a router chose one, and `tokens_in`/`tokens_out` are
    the server's usage when it answered (an answer cut off at max_tokens, or unusable)."""

    def __init__(self, message: str, model: str = "", tokens_in: int = 0, tokens_out: int = 0,
                 reason: str = SERVER_ERROR) -> None:
        super().__init__(message)
        self.model, self.tokens_in, self.tokens_out = model, tokens_in, tokens_out
        self.reason = reason  # one of infra/failure_reasons.py: recorded on the node


class LLMBackend(Protocol):
    """Anything that turns chat messages into a Completion."""

    name: str
    model: str

    async def complete(
        self, messages: list[dict[str, str]], *, temperature: float, max_tokens: int
    ) -> Completion: ...

    def observe(self, model: str, gain: float | None) -> None:
        """Feedback from the commit on a candidate `model` designed: its fitness gain over its
        parent (positive: it improved; None: it was not evaluated). A router learns from it."""

    async def close(self) -> None: ...
