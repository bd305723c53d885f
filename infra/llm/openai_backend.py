"""The LLM backend for any OpenAI-compatible server: vLLM, llama.cpp, a hosted API, or evoforge's simulator.

Every attempt is bounded in time by the endpoint's pace (pace.py: `llm.timeout_s`, or 3x what its
measured speed predicts for the call and the calls queued ahead, whichever is longer), in size by
`max_answer_chars`, and by the context window (window.py): `max_tokens` is lowered to what the
prompt leaves, a prompt leaving fewer than `MIN_ANSWER_TOKENS` is not sent. Prompts are counted
without a tokenizer: spending.py's estimate scaled by what this endpoint reported so far. 429s,
5xx, timeouts and refused connections are retried with jittered backoff (at least Retry-After);
the circuit (circuit.py) decides when they mean the server is down (the call waits) or busy (it
fails with reason `timeout`). An answer cut off at `max_tokens` is asked once more with twice the
room; cut off again, or unusable (not JSON, over the size cap), it is an `LLMAnswerError`: on the
node, never an outage, its usage (both calls') charged. Each call reserves its worst case on the
money budget (spending.py) and settles to the server's usage. Every LLMError says its reason.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import random
import sys
import time
from typing import Any

import openai

from evoforge.infra import failure_reasons as reasons
from evoforge.infra.config import CircuitConfig
from evoforge.infra.llm import window
from evoforge.infra.llm.circuit import CLOSED, Circuit, EndpointDown
from evoforge.infra.llm.pace import Bound, Pace
from evoforge.infra.llm.spending import Spending, SpendingCapReached, prompt_tokens
from evoforge.infra.llm.types import Completion, LLMError, cut_answers_are_kept

_RETRYABLE = (
    openai.RateLimitError,
    openai.InternalServerError,
    openai.APITimeoutError,
    openai.APIConnectionError,
    TimeoutError,  # the whole request outlasted timeout_s
)
_TIMEOUTS = (TimeoutError, openai.APITimeoutError)
MIN_ANSWER_TOKENS = 64  # a prompt that leaves fewer for the answer is not sent
_RATIO_RANGE = (0.2, 2.0)  # server tokens per estimated token: the correction stays within this
_PROBE_TIMEOUT_S = 5.0  # a probe GET that takes longer counts as unanswered
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
        context_window: int | None = None,
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
        self._api_key = api_key
        self._configured_window = context_window
        self.context_window = context_window  # tokens; the config's, else the server's (check()), else None
        self.pace = Pace()
        self._counted = [0, 0]  # estimated and server-reported prompt tokens over the answered calls
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
        listed = [m.model_dump() for m in models.data]
        if not self.model:
            if not names:
                raise LLMUnreachable(f"LLM server at {self.base_url} lists no models; pass --llm-model")
            self.model = names[0]
        elif names and self.model not in names:  # gateways and aliases serve names they do not list
            note = (f"model '{self.model}' is not listed at {self.base_url} (it lists: "
                    f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}); using it anyway")
            print(f"[evoforge] warning: {note}", file=sys.stderr)
            log.warning(note)
        await self._discover(listed)
        return self.model

    async def _discover(self, listed: list[dict[str, Any]]) -> None:
        """Take the context window and slots the server states (the config's window wins)."""
        limits = await window.discover(self.base_url, self._api_key, self.model, listed)
        self.pace.slots = limits.slots
        if self._configured_window is None and limits.context_window:
            self.context_window = limits.context_window
        if self.context_window is None:
            log.info("the context window of %s at %s is unknown (the server does not say it; set "
                     "llm.context_window): requests are not fitted to it", self.model, self.base_url)
        else:
            source = "config" if self._configured_window else limits.source
            log.info("context window of %s at %s: %d tokens (%s); serves %s requests at once",
                     self.model, self.base_url, self.context_window, source, limits.slots or "many")

    @property
    def token_ratio(self) -> float:
        """Server-reported prompt tokens per estimated one, over this endpoint's answered calls."""
        estimated, served = self._counted
        if not estimated or not served:
            return 1.0
        return min(max(served / estimated, _RATIO_RANGE[0]), _RATIO_RANGE[1])

    def count_tokens(self, messages: list[dict[str, str]]) -> int:
        """The prompt's tokens as this endpoint counts them: the estimate times `token_ratio`."""
        return math.ceil(prompt_tokens(messages) * self.token_ratio)

    def fit(self, messages: list[dict[str, str]], max_tokens: int) -> tuple[int, int]:
        """(prompt tokens, max_tokens lowered to fit the window); LLMAnswerError (reason
        reasons.PROMPT_TOO_LONG) when the prompt leaves fewer than MIN_ANSWER_TOKENS for the answer."""
        prompt = self.count_tokens(messages)
        room = self._room(prompt)
        if room is None:
            return prompt, max_tokens
        if room < MIN_ANSWER_TOKENS:
            raise LLMAnswerError(f"the prompt ({prompt} tokens) does not fit the context window "
                                 f"({self.context_window}) of {self.model} at {self.base_url}: it leaves "
                                 f"{max(room, 0)} tokens for the answer, fewer than {MIN_ANSWER_TOKENS}; "
                                 f"not sent", self.model, reason=reasons.PROMPT_TOO_LONG)
        return prompt, min(max_tokens, room)

    def _room(self, prompt: int) -> int | None:
        """Tokens the window leaves for the answer after `prompt` and a margin; None: no window."""
        if self.context_window is None:
            return None
        return self.context_window - prompt - (16 + math.ceil(prompt * 0.03))

    async def complete(
        self, messages: list[dict[str, str]], *, temperature: float, max_tokens: int, hold: bool = True
    ) -> Completion:
        """The answer to `messages`; LLMError when it failed after its retries (the endpoint
        answering other requests meanwhile) or came back unusable; LLMOutage (circuit.py) when
        the endpoint stayed down past the circuit's give-up time. With `hold` False, an open
        circuit raises EndpointDown instead of waiting (a router then tries another endpoint).
        An answer cut off at `max_tokens` is asked once more with twice the room (within the window)."""
        prompt, max_tokens = self.fit(messages, max_tokens)
        try:
            return await self._charged(messages, temperature, max_tokens, hold, prompt)
        except LLMAnswerError as exc:
            if exc.reason != reasons.TRUNCATED:
                raise
            cut = exc
        room = self._room(prompt)
        more = 2 * max_tokens if room is None else min(2 * max_tokens, room)
        if more <= max_tokens:
            raise LLMAnswerError(f"{cut}; the context window ({self.context_window}) leaves no room to "
                                 f"retry with more", self.model, cut.tokens_in, cut.tokens_out,
                                 reason=reasons.TRUNCATED)
        try:
            retried = await self._charged(messages, temperature, more, hold, prompt)
        except LLMError as exc:
            exc.tokens_in, exc.tokens_out = exc.tokens_in + cut.tokens_in, exc.tokens_out + cut.tokens_out
            if exc.reason == reasons.TRUNCATED:
                raise LLMAnswerError(f"{cut}, and again at max_tokens={more} when retried with more room",
                                     self.model, exc.tokens_in, exc.tokens_out,
                                     reason=reasons.TRUNCATED) from None
            raise
        return dataclasses.replace(retried, tokens_in=retried.tokens_in + cut.tokens_in,
                                   tokens_out=retried.tokens_out + cut.tokens_out,
                                   attempts=retried.attempts + 1, truncated_retries=1)

    async def _charged(self, messages: list[dict[str, str]], temperature: float, max_tokens: int,
                       hold: bool, prompt: int) -> Completion:
        """One call held on the money budget: reserved before it is sent, settled to its usage."""
        held = await self._reserve(messages, max_tokens)  # the worst case, before the call is sent
        usage = (0, 0)  # the server's tokens, charged to the reservation however the call ends
        try:
            completion = await self._attempts(messages, temperature, max_tokens, hold, prompt)
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
            try:
                held = self.spending.reserve(self.model, messages, max_tokens)
            except SpendingCapReached as exc:
                exc.reason = reasons.BUDGET
                raise
            if held is not None:
                return held
            await asyncio.sleep(_SPENDING_POLL_S)
        return 0.0

    async def _attempts(self, messages: list[dict[str, str]], temperature: float, max_tokens: int,
                        hold: bool, prompt: int) -> Completion:
        """The answer after retries and circuit waits (one call without the money budget)."""
        start = time.perf_counter()
        circuit = self.circuit
        estimate = prompt_tokens(messages)
        waited = 0.0  # seconds spent waiting for the circuit: not the call's own time
        attempts = retries = 0
        first_failure: float | None = None  # when the first failed attempt was sent
        while True:
            if not hold and circuit.state != CLOSED:
                raise EndpointDown(circuit.name)
            waited += await circuit.wait_closed()
            bound = self.pace.bound(prompt, max_tokens, self._timeout_s)
            sent = circuit.now()
            ticket = self.pace.sent(prompt, max_tokens)
            attempts += 1
            try:
                raw = await self._post(messages, temperature, max_tokens, bound.seconds)
                completion = self._completion(raw, max_tokens)
            except _RETRYABLE as exc:
                self.pace.dropped(ticket)
                reason, timed_out = self._reason(exc, bound), isinstance(exc, _TIMEOUTS)
                first_failure = sent if first_failure is None else first_failure
                circuit.failure(reason, timed_out)
                if circuit.state != CLOSED:
                    retries = 0  # the endpoint is down: wait for it, then a fresh set of retries
                    continue
                retries += 1
                if retries <= self._max_retries:
                    await asyncio.sleep(self._delay(retries, exc))
                    continue
                failed = f"LLM request failed after {attempts} attempts: {reason}"
                if await circuit.answered_since(first_failure, within=circuit.probe_s):
                    raise LLMError(failed, reason=_reason_of(timed_out)) from None
                if not await circuit.down_or_busy(reason, timed_out):  # nobody got an answer meanwhile
                    raise LLMError(f"{failed} (the server answers its probe: busy, not down)",
                                   reason=reasons.TIMEOUT) from None
                retries = 0  # down: the circuit is open, wait for it
                continue
            except openai.APIStatusError as exc:
                self.pace.dropped(ticket)
                circuit.answered(sent)
                raise LLMError(f"LLM request rejected: {self._reason(exc, bound)}",
                               reason=reasons.SERVER_ERROR) from None
            except LLMAnswerError as exc:
                self._learn(ticket, estimate, exc.tokens_in, exc.tokens_out)
                circuit.answered(sent)
                raise
            self._learn(ticket, estimate, completion.tokens_in, completion.tokens_out)
            circuit.answered(sent)
            return dataclasses.replace(completion, attempts=attempts,
                                       seconds=time.perf_counter() - start - waited)

    def _learn(self, ticket: int, estimate: int, tokens_in: int, tokens_out: int) -> None:
        """An answered call: its pace, and how the server's prompt count compares to the estimate."""
        self.pace.answered(ticket, tokens_in, tokens_out)
        if tokens_in:
            self._counted[0] += estimate
            self._counted[1] += tokens_in

    async def _post(self, messages: list[dict[str, str]], temperature: float, max_tokens: int,
                    timeout_s: float) -> bytes:
        """One request's body, read within `timeout_s` and at most `max_answer_chars` bytes."""
        cap = self._max_answer_chars
        async with asyncio.timeout(timeout_s):
            async with self._client.chat.completions.with_streaming_response.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                temperature=temperature,
                max_tokens=max_tokens,
                timeout=timeout_s + 1.0,  # the bound is asyncio's; the client's own must not cut first
            ) as response:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > cap:
                    raise LLMAnswerError(f"the answer is {int(declared)} bytes, over llm.max_answer_chars "
                                         f"({cap}): dropped unread", reason=reasons.MALFORMED)
                body = bytearray()
                async for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > cap:
                        raise LLMAnswerError(f"the answer is over llm.max_answer_chars ({cap}): "
                                             f"dropped after {len(body)} bytes", reason=reasons.MALFORMED)
                return bytes(body)

    def _completion(self, raw: bytes, max_tokens: int) -> Completion:
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
                                 self.model, *tokens, reason=reasons.MALFORMED) from None
        if finish == "length" and not cut_answers_are_kept():
            raise LLMAnswerError(f"the answer was cut off at max_tokens={max_tokens} "
                                 f"(finish_reason 'length', {len(text)} characters)", self.model, *tokens,
                                 reason=reasons.TRUNCATED)
        return Completion(text=text, model=data.get("model") or self.model, backend=self.name,
                          tokens_in=tokens[0], tokens_out=tokens[1], seconds=0.0,
                          cached_tokens=_cached(data), cut_off=finish == "length")

    async def _probe(self) -> str | None:
        """One cheap GET that never queues behind generation: None when the server answered."""
        return await window.probe(self.base_url, self._api_key, min(_PROBE_TIMEOUT_S, self._timeout_s))

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

    def _reason(self, exc: Exception, bound: Bound) -> str:
        if isinstance(exc, _TIMEOUTS):
            seconds = f"{bound.seconds:.0f}" if bound.seconds >= 10 else f"{bound.seconds:.2g}"
            return f"no answer within {seconds} s ({bound.why})"
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


def _reason_of(timed_out: bool) -> str:
    return reasons.TIMEOUT if timed_out else reasons.SERVER_ERROR


def _cached(data: dict[str, Any]) -> int:
    """`usage.prompt_tokens_details.cached_tokens`: prompt tokens the server's prefix cache held."""
    usage = data.get("usage") if isinstance(data, dict) else None
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) and cached > 0 else 0


def _short(exc: Any) -> str:
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__
    return f"{kind} (HTTP {status})" if status else kind
