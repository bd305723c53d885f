"""An answer cut off at max_tokens is asked once more with twice the room (within the context
window), both calls' usage counted and charged; cut off again, it fails with reason `truncated`.
Every LLMError says its failure reason."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evoforge.evaluators.task_model_client import TaskModelClient, TaskModelUsage
from evoforge.infra import failure_reasons
from evoforge.infra.config import ModelPrice
from evoforge.infra.llm.openai_backend import LLMAnswerError, OpenAIBackend
from evoforge.infra.llm.router import Router
from evoforge.infra.llm.spending import Spending, SpendingCapReached
from evoforge.infra.llm.types import Completion, LLMError
from tests.llm_fake_server import MODEL, FakeServer, Reply, answers

MESSAGES = [{"role": "user", "content": "write a function"}]
CUT = Reply(text="def f(x):\n    return", finish="length", usage=(100, 64))
DONE = Reply(text="def f(x):\n    return x", usage=(100, 90))
PRICE = ModelPrice(input_per_mtok=1.0, output_per_mtok=10.0)


def _ask(backend: OpenAIBackend | Router, max_tokens: int = 64) -> Any:
    async def ask() -> Any:
        try:
            return await backend.complete(MESSAGES, temperature=0.0, max_tokens=max_tokens)
        except LLMError as exc:
            return exc
        finally:
            await backend.close()

    return asyncio.run(ask())


def test_a_cut_off_answer_is_asked_again_with_twice_the_room_and_both_calls_are_counted() -> None:
    spend = Spending(None, {MODEL: PRICE})
    with FakeServer(answers(CUT, DONE)) as server:
        completion = _ask(OpenAIBackend(server.base_url, MODEL, spending=spend))
        sent = [chat["max_tokens"] for chat in server.chats]
    assert isinstance(completion, Completion), completion
    assert sent == [64, 128]
    assert completion.text == DONE.text and completion.truncated_retries == 1
    assert (completion.tokens_in, completion.tokens_out) == (200, 154)  # both calls' usage
    assert (spend.calls, spend.tokens_in, spend.tokens_out) == (2, 200, 154)
    assert spend.spent_usd == pytest.approx((200 * 1.0 + 154 * 10.0) / 1e6)


def test_an_answer_that_needs_no_retry_says_so() -> None:
    with FakeServer(answers(DONE)) as server:
        completion = _ask(OpenAIBackend(server.base_url, MODEL))
        assert len(server.chats) == 1
    assert completion.truncated_retries == 0 and completion.tokens_out == 90


def test_the_retry_stays_within_the_context_window() -> None:
    with FakeServer(answers(CUT, DONE)) as server:
        _ask(OpenAIBackend(server.base_url, MODEL, context_window=200), max_tokens=100)
        sent = [chat["max_tokens"] for chat in server.chats]
    # the prompt (14 tokens estimated) and a margin leave 200 - 14 - 17 = 169, not 2 x 100
    assert sent == [100, 169]


def test_cut_off_twice_is_a_truncated_answer_carrying_both_calls_tokens() -> None:
    with FakeServer(answers(CUT)) as server:
        error = _ask(OpenAIBackend(server.base_url, MODEL))
        assert len(server.chats) == 2  # once more, never a third time
    assert isinstance(error, LLMAnswerError) and error.reason == failure_reasons.TRUNCATED
    assert "cut off at max_tokens=64 (finish_reason 'length'" in str(error)
    assert "and again at max_tokens=128 when retried with more room" in str(error)
    assert (error.tokens_in, error.tokens_out) == (200, 128)


def test_the_retry_reserves_on_the_money_budget_like_any_call() -> None:
    # the cap holds the first call's worst case and what it spent, not the retry's worst case
    spend = Spending(0.0009, {MODEL: PRICE})
    with FakeServer(answers(CUT, DONE)) as server:
        error = _ask(OpenAIBackend(server.base_url, MODEL, spending=spend))
        assert len(server.chats) == 1  # the retry was not sent
    assert isinstance(error, SpendingCapReached) and error.reason == failure_reasons.BUDGET
    assert (error.tokens_in, error.tokens_out) == (100, 64)  # the first call's usage, on the node
    assert spend.calls == 1 and spend.reserved_usd == 0.0


@pytest.mark.parametrize(("reply", "reason"), [
    (Reply(status=400), failure_reasons.SERVER_ERROR),  # rejected
    (Reply(raw=b'{"not": "a completion"}'), failure_reasons.MALFORMED),
    (Reply(raw=b"x" * 5000), failure_reasons.MALFORMED),  # over max_answer_chars
])
def test_every_llm_error_says_its_reason(reply: Reply, reason: str) -> None:
    with FakeServer(answers(reply)) as server:
        error = _ask(OpenAIBackend(server.base_url, MODEL, max_retries=0, max_answer_chars=1000))
        assert len(server.chats) == 1  # none of these is retried
    assert isinstance(error, LLMError) and error.reason == reason


def test_a_router_keeps_the_reason() -> None:
    with FakeServer(answers(CUT)) as server:
        error = _ask(Router([(OpenAIBackend(server.base_url, MODEL), 1.0)]))
    assert isinstance(error, LLMError) and error.reason == failure_reasons.TRUNCATED and error.model == MODEL


def test_a_task_models_cut_off_answer_is_kept_as_it_is_without_a_retry() -> None:
    with FakeServer(answers(CUT, DONE)) as server:
        backend = OpenAIBackend(server.base_url, MODEL)
        client = TaskModelClient(backend, concurrency=1, max_tokens=64, temperature=0.0, prices={})
        usage = TaskModelUsage()
        answer = asyncio.run(client.ask(MESSAGES, usage))
        assert [chat["max_tokens"] for chat in server.chats] == [64]  # asked once, at the cap
    assert answer == CUT.text  # the rambling is the prompt's answer, scored by the task
    assert (usage.calls, usage.truncated, usage.tokens_in, usage.tokens_out) == (1, 1, 100, 64)
