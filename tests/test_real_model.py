"""A real model in the loop: SmolLM2-135M-Instruct served by `evoforge serve-llm --model smollm2`
(llama.cpp on the CPU), asked through evoforge's own client (whole runs: tests/test_real_model_runs.py).

What is asserted is what a real model exercises (its chat template, its token counts, answers cut
off at max_tokens, a run that ends on its own with every proposal from the served model), not the
quality of its edits: a 135M model rarely writes a usable one. Skipped without the `local-llm`
extra on a developer's machine; in CI (CI=true) that is a failure (tests/real_model.py)."""

from __future__ import annotations

import asyncio

import pytest

from evoforge.infra.failure_reasons import TRUNCATED
from evoforge.infra.llm.openai_backend import LLMAnswerError, OpenAIBackend
from tests.real_model import RealModel

pytestmark = pytest.mark.slow


def _ask(real_model: RealModel, max_tokens: int) -> tuple[str, object]:
    async def ask() -> tuple[str, object]:
        backend = OpenAIBackend(base_url=real_model.base_url, model=None, timeout_s=300, max_retries=0)
        model = await backend.check()
        try:
            return model, await backend.complete(
                [{"role": "user", "content": "What is the capital of France? Answer in one short sentence."}],
                temperature=0.0, max_tokens=max_tokens)
        except LLMAnswerError as exc:
            return model, exc

    return asyncio.run(ask())


def test_the_served_model_answers_a_chat_completion_through_evoforges_client(real_model):
    model, completion = _ask(real_model, max_tokens=64)
    assert model == real_model.model == "SmolLM2-135M-Instruct.Q4_1"  # the file's name, first listed
    assert not isinstance(completion, Exception), completion
    assert completion.backend == "openai" and completion.model == real_model.model
    assert "Paris" in completion.text  # the GGUF's own ChatML template: an answer, not a continuation
    assert "<|im_" not in completion.text
    # the prompt as the template renders it (system line included) and the answer, counted by the server
    assert completion.tokens_in > 20 and 0 < completion.tokens_out < 64


def test_an_answer_cut_off_at_max_tokens_is_retried_once_then_an_answer_error_that_says_so(real_model):
    _, outcome = _ask(real_model, max_tokens=3)  # "The capital of France is Paris." needs more than 6
    assert isinstance(outcome, LLMAnswerError) and outcome.reason == TRUNCATED
    assert "cut off at max_tokens=3 (finish_reason 'length'" in str(outcome)
    assert "and again at max_tokens=6 when retried with more room" in str(outcome)
    assert outcome.tokens_out == 3 + 6  # both calls' tokens, as the server counted them
