"""An endpoint's context window: read from what the server says (vLLM's /v1/models, llama.cpp's
/props) or the config, and no request sent past it: max_tokens lowered to what the prompt leaves,
a prompt that leaves too little not sent. Prompts are counted by the estimate scaled to what the
server reported."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evoforge.infra import failure_reasons
from evoforge.infra.config import EndpointConfig, LLMConfig
from evoforge.infra.llm.factory import make_backend
from evoforge.infra.llm.openai_backend import MIN_ANSWER_TOKENS, LLMAnswerError, OpenAIBackend
from evoforge.infra.llm.router import Router
from evoforge.infra.llm.spending import prompt_tokens
from tests.llm_fake_server import MODEL, FakeServer, Reply, answers

KEY = "sk-window-test-5e1a"


def _checked(server: FakeServer, **kwargs: Any) -> OpenAIBackend:
    async def check() -> OpenAIBackend:
        backend = OpenAIBackend(server.base_url, None, api_key=KEY, **kwargs)
        await backend.check()
        await backend.close()
        return backend

    return asyncio.run(check())


def _ask(backend: OpenAIBackend, messages: list[dict[str, str]], max_tokens: int) -> Any:
    async def ask() -> Any:
        try:
            return await backend.complete(messages, temperature=0.0, max_tokens=max_tokens)
        except LLMAnswerError as exc:
            return exc
        finally:
            await backend.close()

    return asyncio.run(ask())


def test_vllm_states_its_window_in_the_model_listing() -> None:
    with FakeServer(entry={"max_model_len": 32768}) as server:
        backend = _checked(server)
    assert backend.context_window == 32768
    assert backend.pace.slots is None  # vLLM serves many at once: no queue to account for
    assert "/props" not in server.paths()  # the listing said it: nothing more asked


def test_llama_cpp_states_its_window_and_slots_in_props_with_the_endpoints_key_only() -> None:
    props = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}
    with FakeServer(props=props) as server:
        backend = _checked(server)
    assert backend.context_window == 8192 and backend.pace.slots == 1
    assert ("/props", KEY, {}) in server.requests
    assert {token for _, token, _ in server.requests} == {KEY}


def test_props_with_a_top_level_n_ctx_is_read_too() -> None:
    with FakeServer(props={"n_ctx": 4096}) as server:
        assert _checked(server).context_window == 4096


def test_llama_cpp_python_says_no_window_but_serves_one_request_at_a_time() -> None:
    with FakeServer(title="🦙 llama.cpp Python API") as server:
        backend = _checked(server)
    assert backend.context_window is None and backend.pace.slots == 1
    assert server.paths()[-2:] == ["/props", "/openapi.json"]


def test_a_server_that_says_nothing_leaves_the_window_unknown_and_the_config_decides() -> None:
    with FakeServer() as server:
        assert _checked(server).context_window is None
    with FakeServer(entry={"max_model_len": 32768}) as server:
        assert _checked(server, context_window=2048).context_window == 2048  # the config wins


def test_the_config_window_reaches_each_backend() -> None:
    one = make_backend(LLMConfig(base_url="http://a/v1", model="m", context_window=3000), seed=0)
    assert isinstance(one, OpenAIBackend) and one.context_window == 3000
    router = make_backend(LLMConfig(context_window=6000, endpoints=[
        EndpointConfig(base_url="http://a/v1", model="a", context_window=2000),
        EndpointConfig(base_url="http://b/v1", model="b")]), seed=0)
    assert isinstance(router, Router)
    assert [b.context_window for b in router.arms["a"].endpoints + router.arms["b"].endpoints] == [2000, 6000]
    assert router.context_window == 2000  # the smallest: a prompt that fits it fits either


def test_max_tokens_is_lowered_to_what_the_prompt_leaves_in_the_window() -> None:
    messages = [{"role": "user", "content": "x" * 900}]  # estimated 308 tokens
    with FakeServer() as server:
        backend = OpenAIBackend(server.base_url, MODEL, context_window=1000)
        completion = _ask(backend, messages, max_tokens=4096)
        sent = server.chats[0]["max_tokens"]
    assert completion.text == "ok"
    assert sent < 4096 and prompt_tokens(messages) + sent <= 1000
    assert sent >= 1000 - 308 - 40  # only a small margin kept


def test_a_prompt_that_leaves_too_little_room_is_not_sent() -> None:
    messages = [{"role": "user", "content": "x" * 3000}]  # estimated 1008 tokens
    with FakeServer() as server:
        outcome = _ask(OpenAIBackend(server.base_url, MODEL, context_window=1000), messages, 512)
        assert server.chats == []  # not sent
    assert isinstance(outcome, LLMAnswerError)
    assert outcome.reason == failure_reasons.PROMPT_TOO_LONG in failure_reasons.ALL
    assert "the prompt (1008 tokens) does not fit the context window (1000)" in str(outcome)
    assert f"fewer than {MIN_ANSWER_TOKENS}" in str(outcome)


def test_the_token_count_follows_what_the_server_reported() -> None:
    messages = [{"role": "user", "content": "y" * 600}]  # estimated 208 tokens
    estimate = prompt_tokens(messages)
    with FakeServer(answers(Reply(usage=(104, 5)))) as server:  # the server counts half as many
        backend = OpenAIBackend(server.base_url, MODEL)
        assert backend.count_tokens(messages) == estimate  # nothing reported yet: the estimate
        _ask(backend, messages, 64)
    assert backend.token_ratio == pytest.approx(0.5)
    assert backend.count_tokens(messages) == 104
    router = Router([(backend, 1.0)])
    assert router.count_tokens(messages) == 104  # a router asks its endpoints


def test_the_token_ratio_stays_within_a_sane_range() -> None:
    messages = [{"role": "user", "content": "z" * 30}]  # estimated 18 tokens
    with FakeServer(answers(Reply(usage=(18_000, 5)))) as server:  # a nonsense count
        backend = OpenAIBackend(server.base_url, MODEL)
        _ask(backend, messages, 64)
    assert backend.token_ratio == 2.0


def test_cached_prompt_tokens_are_read_from_the_usage() -> None:
    with FakeServer(answers(Reply(cached=64))) as server:
        completion = _ask(OpenAIBackend(server.base_url, MODEL), [{"role": "user", "content": "hi"}], 32)
    assert completion.cached_tokens == 64
