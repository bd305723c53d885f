"""The LLM simulator, driven over real HTTP by the real openai client."""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from evoforge.infra.edits import apply_answer, parse_answer
from evoforge.infra.evolve_block import EditError
from evoforge.infra.llm_sim.answers import MALFORMED_VARIANTS, build_answer, malformed_answer
from evoforge.infra.llm_sim.cli_args import add_arguments, config_from_args
from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig
from evoforge.infra.prompt_format import render_program_section

PROGRAM = """import math

# EVOLVE-BLOCK-START
def solve(n=10):
    step = 0.25  # learning rate
    total = 0.0
    for i in range(n):
        total += step * math.sin(i)
    return max(total, 0.0)
# EVOLVE-BLOCK-END

print(solve())
"""


def _messages(form: str = "diff", program: str = PROGRAM) -> list[dict[str, str]]:
    prompt = f"Make it better.\n\n{render_program_section(program)}\nAnswer format: {form}\n"
    return [{"role": "user", "content": prompt}]


def _client(sim: SimulatorProcess, timeout: float = 10.0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0, timeout=timeout)


async def _ask(
    sim: SimulatorProcess, form: str = "diff", client_timeout: float = 10.0, max_tokens: int = 4096
) -> str:
    async with _client(sim, client_timeout) as client:
        response = await client.chat.completions.create(
            model=sim.config.model, messages=_messages(form), max_tokens=max_tokens
        )
    return response.choices[0].message.content or ""


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(SimConfig(median_s=0.05, sigma=0.2, slots=2, seed=1)) as process:
        yield process


def _failing(kind: str, median_s: float = 0.05) -> SimulatorProcess:
    """A simulator where every request fails with ``kind``."""
    config = SimConfig(median_s=median_s, sigma=0.0, error_rate=1.0, error_kinds=(kind,))
    return SimulatorProcess(config)


def test_models_lists_the_served_model(sim: SimulatorProcess) -> None:
    async def run() -> list[str]:
        async with _client(sim) as client:
            return [model.id async for model in client.models.list()]

    assert asyncio.run(run()) == ["evoforge-sim"]


@pytest.mark.parametrize("form", ["diff", "rewrite"])
def test_answer_applies_cleanly_to_the_prompt_program(sim: SimulatorProcess, form: str) -> None:
    text = asyncio.run(_ask(sim, form))
    assert text.startswith("Simulated answer (evoforge llm-sim, no real LLM): ")
    answer = parse_answer(text)
    assert answer.kind == form
    new = apply_answer(PROGRAM, answer)
    assert new != PROGRAM


def test_completion_reports_usage_and_finish_reason(sim: SimulatorProcess) -> None:
    async def run() -> openai.types.chat.ChatCompletion:
        async with _client(sim) as client:
            return await client.chat.completions.create(model="any-name", messages=_messages())

    response = asyncio.run(run())
    assert response.object == "chat.completion" and response.model == "evoforge-sim"
    assert response.choices[0].finish_reason == "stop"
    usage = response.usage
    assert usage.prompt_tokens > 20 and usage.completion_tokens > 10
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_short_max_tokens_truncates_with_finish_reason_length(sim: SimulatorProcess) -> None:
    async def run() -> openai.types.chat.ChatCompletion:
        async with _client(sim) as client:
            return await client.chat.completions.create(
                model="m", messages=_messages("rewrite"), max_tokens=20
            )

    response = asyncio.run(run())
    assert response.choices[0].finish_reason == "length"
    assert len(response.choices[0].message.content) == 80


def test_streaming_is_refused_with_an_openai_error(sim: SimulatorProcess) -> None:
    response = httpx.post(f"{sim.base_url}/chat/completions", json={"messages": _messages(), "stream": True})
    assert response.status_code == 400
    assert "streaming is not supported" in response.json()["error"]["message"]


def test_same_seed_and_order_give_the_same_answers(sim: SimulatorProcess) -> None:
    async def three() -> list[str]:
        return [await _ask(sim, form) for form in ("diff", "rewrite", "diff")]

    sim.reset(seed=9)
    first = asyncio.run(three())
    sim.reset(seed=9)
    assert asyncio.run(three()) == first
    sim.reset(seed=10)
    assert asyncio.run(three()) != first


def test_answers_are_a_pure_function_of_prompt_and_generator() -> None:
    prompt = _messages()[0]["content"]
    assert build_answer(prompt, random.Random(4)) == build_answer(prompt, random.Random(4))


def test_limited_slots_make_requests_queue() -> None:
    latency = 0.3
    with SimulatorProcess(SimConfig(median_s=latency, sigma=0.0, slots=2)) as sim:
        sim.reset()

        async def six() -> float:
            async with _client(sim) as client:
                started = time.monotonic()
                await asyncio.gather(
                    *(client.chat.completions.create(model="m", messages=_messages()) for _ in range(6))
                )
                return time.monotonic() - started

        wall = asyncio.run(six())
        stats = sim.stats()
    assert wall >= 3 * latency
    assert stats["completed"] == 6 and stats["requests"] == 6 and stats["slots"] == 2
    assert 6 * latency <= stats["busy_slot_seconds"] < 6 * latency * 1.5
    assert stats["utilisation"] > 0.6
    assert stats["mean_queue_wait_s"] > 0.2
    assert stats["mean_latency_s"] >= latency


def test_injected_429_is_a_rate_limit_error_with_retry_after() -> None:
    with _failing("429") as sim:
        with pytest.raises(openai.RateLimitError) as info:
            asyncio.run(_ask(sim))
        assert sim.stats()["errors"] == {"429": 1}
    assert info.value.response.headers["retry-after"] == "1"


def test_injected_500_is_an_internal_server_error() -> None:
    with _failing("500") as sim, pytest.raises(openai.InternalServerError):
        asyncio.run(_ask(sim))


def test_malformed_answers_all_fail_to_apply() -> None:
    with _failing("malformed", median_s=0.01) as sim:

        async def twelve() -> list[str]:
            return [await _ask(sim) for _ in range(12)]

        texts = asyncio.run(twelve())
        assert sim.stats()["errors"] == {"malformed": 12}
    for text in texts:
        with pytest.raises(EditError):
            apply_answer(PROGRAM, parse_answer(text))


@pytest.mark.parametrize("variant", MALFORMED_VARIANTS)
def test_each_malformed_variant_raises_edit_error(variant: str) -> None:
    prompt = _messages()[0]["content"]
    for seed in range(10):
        text = malformed_answer(prompt, random.Random(seed), variant)
        with pytest.raises(EditError):
            apply_answer(PROGRAM, parse_answer(text))


def test_hang_trips_the_client_timeout_and_frees_the_slot() -> None:
    with _failing("hang") as sim:
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            asyncio.run(_ask(sim, client_timeout=0.5))
        assert time.monotonic() - started < 3
        deadline = time.monotonic() + 3
        while sim.stats()["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = sim.stats()
    assert stats["in_flight"] == 0
    assert stats["errors"] == {"hang": 1, "client_disconnect": 1}


def test_process_that_cannot_start_reports_its_error() -> None:
    error = pytest.raises(RuntimeError, match="llm-sim exited with code 1: .*cannot listen")
    with error, SimulatorProcess(host="203.0.113.7"):
        pass


def test_cli_arguments_build_the_config() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    ns = parser.parse_args(
        ["--port", "0", "--median", "0.5", "--slots", "3", "--error-kinds", "429, hang", "--seed", "4"]
    )
    config, host, port = config_from_args(ns)
    assert (host, port) == ("127.0.0.1", 0)
    assert config == SimConfig(median_s=0.5, slots=3, error_kinds=("429", "hang"), seed=4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slots", "0"], "slots must be at least 1"),
        (["--error-rate", "1.5"], "error rate must be between 0 and 1"),
        (["--error-kinds", "429,teapot"], "unknown error kinds"),
        (["--port", "70000"], "port must be between"),
    ],
)
def test_cli_arguments_are_validated(argv: list[str], message: str) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ValueError, match=message):
        config_from_args(parser.parse_args(argv))
