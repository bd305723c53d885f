"""The LLM backend for any OpenAI-compatible server: vLLM, a hosted API, or evoforge's simulator."""

from __future__ import annotations

import asyncio
import random
import time

import openai

from evoforge.infra.llm.types import Completion, LLMError

_RETRYABLE = (
    openai.RateLimitError,
    openai.InternalServerError,
    openai.APITimeoutError,
    openai.APIConnectionError,
)


class LLMUnreachable(LLMError):
    """The server could not be reached or refused us at startup: a user error."""


class OpenAIBackend:
    """Async chat completions with timeouts and bounded retries with jittered backoff."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str | None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        seed: int = 0,
    ):
        self.base_url = base_url
        self.model = model or ""
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=0
        )
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._rng = random.Random(seed)

    async def check(self) -> str:
        """Confirm the server answers and pick its model when none was named; returns the model."""
        try:
            models = await self._client.models.list()
        except (openai.APIConnectionError, openai.APITimeoutError):
            raise LLMUnreachable(f"LLM server unreachable at {self.base_url}") from None
        except openai.APIStatusError as exc:
            raise LLMUnreachable(
                f"LLM server at {self.base_url} refused /models: HTTP {exc.status_code}"
            ) from None
        names = [m.id for m in models.data]
        if not self.model:
            if not names:
                raise LLMUnreachable(f"LLM server at {self.base_url} lists no models; pass --llm-model")
            self.model = names[0]
        elif names and self.model not in names:
            raise LLMUnreachable(
                f"model '{self.model}' is not served at {self.base_url} (it serves: {', '.join(names)})"
            )
        return self.model

    async def complete(
        self, messages: list[dict[str, str]], *, temperature: float, max_tokens: int
    ) -> Completion:
        start = time.perf_counter()
        last_error = ""
        for attempt in range(1, self._max_retries + 2):
            try:
                resp = await self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    temperature=temperature,
                    max_tokens=max_tokens,
                )
            except _RETRYABLE as exc:
                last_error = _short(exc)
                if attempt > self._max_retries:
                    break
                await asyncio.sleep(self._delay(attempt, exc))
                continue
            except openai.APIStatusError as exc:
                raise LLMError(f"LLM request rejected: {_short(exc)}") from None
            text = resp.choices[0].message.content if resp.choices else None
            usage = resp.usage
            return Completion(
                text=text or "",
                model=resp.model or self.model,
                backend=self.name,
                tokens_in=usage.prompt_tokens if usage else 0,
                tokens_out=usage.completion_tokens if usage else 0,
                seconds=time.perf_counter() - start,
                attempts=attempt,
            )
        raise LLMError(f"LLM request failed after {self._max_retries + 1} attempts: {last_error}")

    def _delay(self, attempt: int, exc: Exception) -> float:
        retry_after = None
        response = getattr(exc, "response", None)
        if response is not None:
            try:
                retry_after = float(response.headers.get("retry-after", ""))
            except ValueError:
                retry_after = None
        base = self._backoff_s * 2 ** (attempt - 1)
        delay = max(base, retry_after or 0.0)
        return min(delay, 60.0) * (0.5 + self._rng.random() / 2)

    def observe(self, model: str, gain: float | None) -> None:
        """One server, nothing to learn from the feedback."""

    async def close(self) -> None:
        await self._client.close()


def _short(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__
    return f"{kind} (HTTP {status})" if status else kind
