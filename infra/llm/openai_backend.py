"""The LLM backend for any OpenAI-compatible server: vLLM, a hosted API, or evoforge's simulator.

Every attempt is bounded: `timeout_s` for the whole request (a server that hangs, or trickles
bytes, cannot hold a slot longer), and `max_answer_chars` for the body read (a huge answer is
dropped unread past the cap). 429s, 5xx, timeouts and refused connections are retried with
jittered exponential backoff (at least the server's Retry-After); the endpoint's circuit
(circuit.py) decides when they mean the server is down, and then the call waits instead of
failing. An answer that arrives but cannot be used (not JSON, cut off at `max_tokens`, over the
size cap) is an `LLMAnswerError`: recorded on the node, never retried, never an outage; the
server's usage it carries is charged like an answer's. Each call reserves its worst case on the
run's money budget (spending.py) before it is sent and settles to the server's usage after.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
import time
from typing import Any

import openai

from evoforge.infra.config import CircuitConfig
from evoforge.infra.llm.circuit import CLOSED, Circuit, EndpointDown
from evoforge.infra.llm.spending import Spending
from evoforge.infra.llm.types import Completion, LLMError

_RETRYABLE = (
    openai.RateLimitError,
    openai.InternalServerError,
    openai.APITimeoutError,
    openai.APIConnectionError,
    TimeoutError,  # the whole request outlasted timeout_s
)
_PROBE = [{"role": "user", "content": "ping"}]
log = logging.getLogger("evoforge.llm")
_MAX_DELAY_S = 60.0
_SPENDING_POLL_S = 0.05  # how often a call waits for the calls in flight to settle the money budget


class LLMUnreachable(LLMError):
    """The server could not be reached or refused us at startup: a user error."""


class LLMAnswerError(LLMError):
    """The server answered, but the answer is unusable (not JSON, cut off, too large)."""


class OpenAIBackend:
    """Async chat completions with timeouts, bounded retries with jittered backoff, a cap on the
    answer's size, and a circuit breaker that waits out an outage."""

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
        max_answer_chars: int = 1_000_000,
        circuit: CircuitConfig | None = None,
        spending: Spending | None = None,
    ):
        self.base_url = base_url
        self.spending = spending  # the run's money budget, shared by its backends
        self.model = model or ""
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=0
        )
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_s = backoff_s
        self._max_answer_chars = max_answer_chars
        self._rng = random.Random(seed)
        breaker = circuit or CircuitConfig()
        self.circuit = Circuit(base_url, self._probe, failures=breaker.failures,
                               probe_s=breaker.probe_s, give_up_s=breaker.give_up_s)

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
        elif names and self.model not in names:  # gateways and aliases serve names they do not list
            note = (f"model '{self.model}' is not listed at {self.base_url} (it lists: "
                    f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}); using it anyway")
            print(f"[evoforge] warning: {note}", file=sys.stderr)
            log.warning(note)
        return self.model

    async def complete(
        self, messages: list[dict[str, str]], *, temperature: float, max_tokens: int, hold: bool = True
    ) -> Completion:
        """The answer to `messages`; LLMError when it failed after its retries (the endpoint
        answering other requests meanwhile) or came back unusable; LLMOutage (circuit.py) when
        the endpoint stayed down past the circuit's give-up time. With `hold` False, an open
        circuit raises EndpointDown instead of waiting (a router then tries another endpoint)."""
        held = await self._reserve(messages, max_tokens)  # the worst case, before the call is sent
        usage = (0, 0)  # the server's tokens, charged to the reservation however the call ends
        try:
            completion = await self._attempts(messages, temperature, max_tokens, hold)
            usage = (completion.tokens_in, completion.tokens_out)
            return completion
        except LLMError as exc:
            usage = (exc.tokens_in, exc.tokens_out)
            raise
        finally:
            if self.spending is not None:
                self.spending.settle(held, self.model, *usage)

    async def _reserve(self, messages: list[dict[str, str]], max_tokens: int) -> float:
        """Hold the call's worst case on the money budget, waiting while the calls in flight hold
        the rest; SpendingCapReached when it does not fit in what is left."""
        while self.spending is not None:
            held = self.spending.reserve(self.model, messages, max_tokens)
            if held is not None:
                return held
            await asyncio.sleep(_SPENDING_POLL_S)
        return 0.0

    async def _attempts(
        self, messages: list[dict[str, str]], temperature: float, max_tokens: int, hold: bool
    ) -> Completion:
        """The answer after retries and circuit waits (complete() without the money budget)."""
        start = time.perf_counter()
        circuit = self.circuit
        waited = 0.0  # seconds spent waiting for the circuit: not the call's own time
        attempts = retries = 0
        first_failure: float | None = None  # when the first failed attempt was sent
        while True:
            if not hold and circuit.state != CLOSED:
                raise EndpointDown(circuit.name)
            waited += await circuit.wait_closed()
            sent = circuit.now()
            attempts += 1
            try:
                raw = await self._post(messages, temperature, max_tokens)
            except _RETRYABLE as exc:
                reason = self._reason(exc)
                first_failure = sent if first_failure is None else first_failure
                circuit.failure(reason)
                if circuit.state != CLOSED:
                    retries = 0  # the endpoint is down: wait for it, then a fresh set of retries
                    continue
                retries += 1
                if retries <= self._max_retries:
                    await asyncio.sleep(self._delay(retries, exc))
                    continue
                if await circuit.answered_since(first_failure, within=circuit.probe_s):
                    raise LLMError(f"LLM request failed after {attempts} attempts: {reason}") from None
                circuit.trip(reason)  # nobody got an answer meanwhile: the server is down
                retries = 0
                continue
            except openai.APIStatusError as exc:
                circuit.answered(sent)
                raise LLMError(f"LLM request rejected: {self._reason(exc)}") from None
            except LLMAnswerError:
                circuit.answered(sent)
                raise
            circuit.answered(sent)
            return self._completion(raw, max_tokens, attempts, time.perf_counter() - start - waited)

    async def _post(self, messages: list[dict[str, str]], temperature: float, max_tokens: int) -> bytes:
        """One request's body, read within `timeout_s` and at most `max_answer_chars` bytes."""
        cap = self._max_answer_chars
        async with asyncio.timeout(self._timeout_s):
            async with self._client.chat.completions.with_streaming_response.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=temperature,
                max_tokens=max_tokens,
            ) as response:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > cap:
                    raise LLMAnswerError(f"the answer is {int(declared)} bytes, over llm.max_answer_chars "
                                         f"({cap}): dropped unread")
                body = bytearray()
                async for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > cap:
                        raise LLMAnswerError(f"the answer is over llm.max_answer_chars ({cap}): "
                                             f"dropped after {len(body)} bytes")
                return bytes(body)

    def _completion(self, raw: bytes, max_tokens: int, attempts: int, seconds: float) -> Completion:
        """The Completion in a response body; LLMAnswerError when it is not a usable answer."""
        tokens = (0, 0)
        try:
            data = json.loads(raw)
            tokens = _usage(data)  # counted even when the rest of the answer is unusable
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            finish = choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            head = raw[:80].decode(errors="replace")
            raise LLMAnswerError(f"the server's answer is not a chat completion "
                                 f"({type(exc).__name__}: {exc}; it begins {head!r})",
                                 self.model, *tokens) from None
        if finish == "length":
            raise LLMAnswerError(f"the answer was cut off at max_tokens={max_tokens} "
                                 f"(finish_reason 'length', {len(text)} characters)", self.model, *tokens)
        return Completion(
            text=text,
            model=data.get("model") or self.model,
            backend=self.name,
            tokens_in=tokens[0],
            tokens_out=tokens[1],
            seconds=seconds,
            attempts=attempts,
        )

    async def _probe(self) -> str | None:
        """One tiny chat request: None when the server answered (anything), else why not."""
        try:
            await self._post(_PROBE, temperature=0.0, max_tokens=1)
        except _RETRYABLE as exc:
            return self._reason(exc)
        except (openai.APIStatusError, LLMAnswerError):
            return None  # an answer, if not a useful one: the server is up
        return None

    def _delay(self, attempt: int, exc: Exception) -> float:
        retry_after = None
        response = getattr(exc, "response", None)
        if response is not None:
            try:
                retry_after = float(response.headers.get("retry-after", ""))
            except ValueError:
                retry_after = None
        jittered = min(self._backoff_s * 2 ** (attempt - 1), _MAX_DELAY_S) * (0.5 + self._rng.random() / 2)
        return min(max(jittered, retry_after or 0.0), _MAX_DELAY_S)

    def _reason(self, exc: Exception) -> str:
        if isinstance(exc, TimeoutError):
            return f"no answer within llm.timeout_s ({self._timeout_s:g} s)"
        return _short(exc)

    def observe(self, model: str, gain: float | None) -> None:
        """One server, nothing to learn from the feedback."""

    async def close(self) -> None:
        await self.circuit.close()
        await self._client.close()


def _usage(data: Any) -> tuple[int, int]:
    """(prompt, completion) tokens of a response body's `usage`; (0, 0) when it has none."""
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    try:
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    except (TypeError, ValueError):
        return 0, 0


def _short(exc: Any) -> str:
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__
    return f"{kind} (HTTP {status})" if status else kind
