"""The one interface every LLM backend implements: chat messages in, a Completion out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class LLMError(RuntimeError):
    """A request that failed after its retries; the message is recorded on the node, `model`
    names the model the call went to when a router chose one, and `tokens_in`/`tokens_out` are
    the server's usage when it answered (an answer cut off at max_tokens, or unusable)."""

    def __init__(self, message: str, model: str = "", tokens_in: int = 0, tokens_out: int = 0) -> None:
        super().__init__(message)
        self.model, self.tokens_in, self.tokens_out = model, tokens_in, tokens_out


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
