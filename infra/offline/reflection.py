"""Answers to reflection prompts from the non-LLM answerers (offline proposer, simulator)."""

from __future__ import annotations

import random

from evoforge.infra.evolve_block import EditError
from evoforge.infra.offline.answer import render_answer
from evoforge.infra.offline.mutate import mutate_program
from evoforge.infra.prompt_format import FORMAT_DIFF, extract_program, render_decision


def reflection_answer(prompt: str, decision: str, rng: random.Random, preface: str) -> str:
    """A reflection answer with `decision`; a patch is a fresh mutation of the prompt's program."""
    program = extract_program(prompt)
    if decision == "patch" and program is not None:
        try:
            mutation = mutate_program(program, rng)
        except EditError:
            decision = "keep"
        else:
            motivation = f"{preface}: patch, re-applied onto the current program: {mutation.description}"
            return f"{render_decision('patch')}\n{render_answer(program, mutation, FORMAT_DIFF, motivation)}"
    reasons = {"keep": "the candidate's change is independent of the pool's updates",
               "drop": "the pool's updates already cover the candidate's change"}
    return f"{render_decision(decision)}\n{preface}: {reasons.get(decision, decision)}."


def draw_decision(rng: random.Random, keep: float = 0.3, patch: float = 0.5) -> str:
    """A seeded keep / patch / drop draw for the simulator."""
    draw = rng.random()
    return "keep" if draw < keep else "patch" if draw < keep + patch else "drop"
