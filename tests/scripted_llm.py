"""A stand-in for an LLM in unit tests (no LLM can run here): a fixed answer, or an LLMError."""

from __future__ import annotations

from evoforge.infra.llm.types import Completion, LLMError


class Scripted:
    """Answers every request with `text` (None: fails like a server after its retries), at a
    fixed cost, and keeps the prompts it was sent."""

    name = "scripted"

    def __init__(self, text: str | None, model: str = "scripted", tokens: tuple[int, int] = (100, 20),
                 seconds: float = 0.5):
        self.text, self.model, self.tokens, self.seconds = text, model, tokens, seconds
        self.prompts: list[str] = []

    async def complete(self, messages, *, temperature, max_tokens):
        self.prompts.append(messages[-1]["content"])
        if self.text is None:
            raise LLMError("HTTP 500 after 3 attempts")
        return Completion(self.text, self.model, "openai", *self.tokens, self.seconds)

    async def close(self):
        return None
