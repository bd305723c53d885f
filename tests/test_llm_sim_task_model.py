"""The simulator as a task model and as a proposer for text artifacts, on the house_style task."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import openai
import pytest

from evoforge.infra.edits import apply_answer, parse_answer
from evoforge.infra.llm_sim.answers import build_answer
from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig
from evoforge.infra.llm_sim.task_model import (
    SIMULATED_LINE,
    is_task_model_call,
    read_style,
    task_model_answer,
)
from evoforge.infra.llm_sim.text_edits import (
    FALLBACK_SENTENCE,
    GENERIC_SENTENCES,
    MOTIVATION,
    RULE_SENTENCES,
    TEXT_LANGUAGE,
)
from evoforge.infra.prompt_format import render_feedback_section, render_program_section
from tests.test_house_style_task import TASK, load_evaluator

HOUSE = load_evaluator()
INITIAL = (TASK / "prompt.md").read_text()
ALL_RULES = INITIAL.rstrip() + " " + " ".join(s.format(n=HOUSE.MAX_WORDS) for s in RULE_SENTENCES.values())


async def _sim_llm(messages: list[dict]) -> str:
    return task_model_answer(messages[0]["content"], messages[-1]["content"])


def _val(prompt: str) -> list[tuple[dict, str]]:
    """(case, output) of every val case, run through the task's run() with the simulated model."""

    async def every() -> list[str]:
        return [await HOUSE.run(prompt, case, _sim_llm) for case in HOUSE.cases()["val"]]

    return list(zip(HOUSE.cases()["val"], asyncio.run(every()), strict=True))


def _score(prompt: str) -> float:
    results = _val(prompt)
    return sum(HOUSE.metric(case, output) for case, output in results) / len(results)


def _feedback_lines(prompt: str) -> list[str]:
    lines = []
    for case, output in _val(prompt):
        text = HOUSE.feedback(case, output, HOUSE.metric(case, output))
        lines += [f"[{case['id']}] {line}" for line in text.splitlines()]
    return lines


def _research(prompt: str, feedback: list[str], form: str) -> str:
    return (f"# Task: house_style\nImprove the prompt.\n{render_program_section(prompt, TEXT_LANGUAGE)}\n"
            + (render_feedback_section(feedback) if feedback else "") + f"\nAnswer format: {form}\n")


def test_the_initial_prompt_scores_low_on_val() -> None:
    assert 0.2 <= _score(INITIAL) <= 0.3  # only correctness passes: about 0.25


def test_a_prompt_stating_every_rule_scores_one() -> None:
    assert _score(ALL_RULES) == 1.0


@pytest.mark.parametrize("rule", sorted(RULE_SENTENCES))
def test_each_rule_stated_alone_raises_the_score(rule: str) -> None:
    prompt = f"{INITIAL.rstrip()} {RULE_SENTENCES[rule].format(n=HOUSE.MAX_WORDS)}"
    assert _score(prompt) > _score(INITIAL) + 0.1
    assert read_style(prompt) != read_style(INITIAL)


@pytest.mark.parametrize("prompt", [INITIAL, ALL_RULES, ""])
def test_every_output_has_the_simulated_second_line(prompt: str) -> None:
    for _, output in _val(prompt):
        assert output.splitlines()[1] == SIMULATED_LINE and len(output.splitlines()) == 2


def test_the_answer_depends_on_system_and_user_only() -> None:
    user = "Question: What is 12 times 11?"
    expected = "Answer: 132.\n" + SIMULATED_LINE
    assert task_model_answer(ALL_RULES, user) == expected
    assert build_answer(user, random.Random(1), ALL_RULES) == build_answer(user, random.Random(2), ALL_RULES)
    assert build_answer(user, random.Random(1), ALL_RULES) == expected
    assert task_model_answer("", user).splitlines()[0] == "The result is one hundred thirty-two, I believe!"


def test_a_question_it_does_not_understand_gets_i_do_not_know() -> None:
    assert task_model_answer("", "Who wrote Hamlet?").splitlines()[0] == "I do not know!"
    assert task_model_answer(ALL_RULES, "Who wrote Hamlet?").splitlines()[0] == "Answer: i do not."


def test_evoforge_own_prompts_are_not_task_model_calls() -> None:
    research = _research(INITIAL, [], "diff")
    assert not is_task_model_call(research)
    for marker in ("Analysis request:", "Judge request:", "Plan request:", "Reflection decision:"):
        assert not is_task_model_call(f"{marker} something\n")
    assert is_task_model_call("Question: What is 2 + 2?")


@pytest.mark.parametrize("form", ["diff", "rewrite"])
@pytest.mark.parametrize("rule", sorted(RULE_SENTENCES))
def test_a_feedback_phrase_becomes_an_instruction_the_task_model_follows(form: str, rule: str) -> None:
    prompt = _research(INITIAL, [f"[val-3] {HOUSE.PHRASES[rule]}", "[val-4] unrelated words"], form)
    answer = build_answer(prompt, random.Random(0))
    assert answer.startswith(MOTIVATION)
    parsed = parse_answer(answer)
    assert parsed.kind == form
    new = apply_answer(INITIAL, parsed, language="text")
    assert RULE_SENTENCES[rule].format(n=HOUSE.MAX_WORDS) in new
    assert read_style(new) != read_style(INITIAL) and _score(new) > _score(INITIAL)


@pytest.mark.parametrize("form", ["diff", "rewrite"])
def test_without_usable_feedback_it_adds_a_harmless_sentence(form: str) -> None:
    prompt = ALL_RULES + "\n"
    for _ in range(len(GENERIC_SENTENCES) + 2):
        answer = build_answer(_research(prompt, ["[val-0] The answer must give the correct number."], form),
                              random.Random(5))
        new = apply_answer(prompt, parse_answer(answer), language="text")
        assert new != prompt and read_style(new) == read_style(prompt) and _score(new) == 1.0
        prompt = new
    assert all(sentence in prompt for sentence in GENERIC_SENTENCES) and FALLBACK_SENTENCE in prompt


def test_a_diff_search_is_unique_when_the_last_line_repeats() -> None:
    parent = "Be kind.\nBe brief.\nHelp.\nBe brief.\n"
    answer = build_answer(_research(parent, [HOUSE.PHRASES["prefix"]], "diff"), random.Random(0))
    new = apply_answer(parent, parse_answer(answer), language="text")
    assert new == "Be kind.\nBe brief.\nHelp.\nBe brief. " + RULE_SENTENCES["prefix"] + "\n"


def test_the_simulated_proposer_learns_every_rule_in_eight_rounds() -> None:
    rng, prompt, scores = random.Random(11), INITIAL, [_score(INITIAL)]
    for round_number in range(8):
        form = ("diff", "rewrite")[round_number % 2]
        answer = build_answer(_research(prompt, _feedback_lines(prompt), form), rng)
        prompt = apply_answer(prompt, parse_answer(answer), language="text")
        scores.append(_score(prompt))
    assert scores[-1] == 1.0 and scores[0] < 0.3
    assert scores == sorted(scores)  # every round keeps or raises the score
    style = read_style(prompt)
    assert style.prefix and style.digits and style.lowercase and style.full_stop
    assert style.max_words == HOUSE.MAX_WORDS


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.1, slots=4, seed=1)) as process:
        yield process


async def _chat(sim: SimulatorProcess, messages: list[dict]) -> str:
    async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0, timeout=10) as client:
        response = await client.chat.completions.create(model=sim.config.model, messages=messages)
    return response.choices[0].message.content or ""


def test_a_task_model_call_over_http_answers_from_the_system_message(sim: SimulatorProcess) -> None:
    case = HOUSE.cases()["val"][0]

    async def llm(messages: list[dict]) -> str:
        return await _chat(sim, messages)

    output = asyncio.run(HOUSE.run(ALL_RULES, case, llm))
    assert output == f"Answer: {case['answer']}.\n{SIMULATED_LINE}"
    assert HOUSE.metric(case, output) == 1.0
    initial = asyncio.run(HOUSE.run(INITIAL, case, llm))
    assert initial == asyncio.run(HOUSE.run(INITIAL, case, _sim_llm))
    assert HOUSE.metric(case, initial) < 0.5


@pytest.mark.parametrize("form", ["diff", "rewrite"])
def test_a_research_prompt_over_http_gets_an_edit_adding_the_rule(sim: SimulatorProcess, form: str) -> None:
    feedback = [f"[val-{i}] {HOUSE.PHRASES['digits']}" for i in range(3)]
    messages = [{"role": "system", "content": "You improve prompts."},
                {"role": "user", "content": _research(INITIAL, feedback, form)}]
    answer = asyncio.run(_chat(sim, messages))
    new = apply_answer(INITIAL, parse_answer(answer), language="text")
    assert new == f"{INITIAL.rstrip()} {RULE_SENTENCES['digits']}\n"
