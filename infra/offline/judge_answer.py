"""Answers to judge prompts from the non-LLM answerers: the offline backend has no judgement and
gives no score; the simulator gives a seeded one."""

from __future__ import annotations

import random

from evoforge.infra.prompt_format import render_judge_score

OFFLINE_JUDGE = "Offline judge (no LLM)"


def offline_judge_answer(preface: str = OFFLINE_JUDGE) -> str:
    """No score: judging code quality needs an LLM."""
    return (f"{preface}: no judgement of code quality without an LLM, so no score is given; the "
            f"candidate keeps no judge score and its fitness is its task score.")


def simulated_judge_answer(rng: random.Random, preface: str) -> str:
    """A seeded score line, labelled as the simulator's."""
    return f"{preface}: a seeded score, not a judgement.\n{render_judge_score(rng.randint(2, 9))}"
