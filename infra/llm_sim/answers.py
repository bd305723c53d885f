"""What the simulated LLM says: a real mutation of the prompt's program, or a deliberate dud (and
a seeded structured report to an analysis prompt, a seeded score to a judge prompt, an added
instruction to a text artifact (text_edits.py), delta operations to a playbook (playbook_edits.py),
ACE's reflection on trajectories (ace_reflector.py), and a task model's answer to any message that
is none of evoforge's own prompts (task_model.py))."""

from __future__ import annotations

import random

from evoforge.infra.ace_format import is_reflector_prompt
from evoforge.infra.edits import SearchReplace, render_diff
from evoforge.infra.evolve_block import START_MARKER, EditError
from evoforge.infra.extraction_format import is_extraction_prompt
from evoforge.infra.llm_sim.ace_reflector import reflector_answer
from evoforge.infra.llm_sim.citations import citation_lines
from evoforge.infra.llm_sim.extraction import extraction_answer
from evoforge.infra.llm_sim.playbook_edits import PLAYBOOK_LANGUAGE, playbook_edit_answer
from evoforge.infra.llm_sim.task_model import is_task_model_call, task_model_answer
from evoforge.infra.llm_sim.text_edits import TEXT_LANGUAGE, text_edit_answer
from evoforge.infra.offline.analysis import simulated_analysis
from evoforge.infra.offline.answer import render_answer
from evoforge.infra.offline.judge_answer import simulated_judge_answer
from evoforge.infra.offline.mutate import mutate_program
from evoforge.infra.offline.plan_answer import simulated_plan_answer
from evoforge.infra.offline.reflection import draw_decision, reflection_answer
from evoforge.infra.prompt_format import (
    PROGRAM_HEADER,
    extract_program,
    is_analysis_prompt,
    is_judge_prompt,
    is_plan_prompt,
    is_reflection_prompt,
    program_language,
    requested_format,
)

PREFACE = "Simulated answer (evoforge llm-sim, no real LLM)"
MALFORMED_VARIANTS = ("garbled", "missing_search", "outside_block", "empty")

_GARBLED = (
    "The program could do better if its parameters adapted to the input. I would make the "
    "step size depend on the current score and shrink it as the search converges.",
    "Looking at the evaluation results, the main bottleneck seems to be the initial layout. "
    "A smarter initialisation, followed by a short local search, should raise the score.",
    "I am not certain which change helps most here; tuning the margins and the iteration "
    "count are both plausible, so I would try each in turn and keep the better one.",
)


def build_answer(prompt: str, rng: random.Random, system: str = "") -> str:
    """An answer that edits the prompt's program the way the prompt asks (diff or rewrite); an
    analysis or a judge prompt gets a seeded answer in the form it asks for; a message that is none
    of evoforge's own prompts gets the task model's answer to it under the ``system`` message."""
    if is_extraction_prompt(prompt):
        return extraction_answer(prompt)
    if is_reflector_prompt(prompt):
        return reflector_answer(prompt)
    if is_task_model_call(prompt):
        return task_model_answer(system, prompt)
    if is_analysis_prompt(prompt):
        return simulated_analysis(prompt, rng, PREFACE)
    if is_judge_prompt(prompt):
        return simulated_judge_answer(rng, PREFACE)
    if is_plan_prompt(prompt):
        return simulated_plan_answer(prompt, rng, PREFACE)
    program = extract_program(prompt)
    if program is None:
        return f"{PREFACE}: the prompt carries no '{PROGRAM_HEADER}' section, so I cannot edit it."
    if is_reflection_prompt(prompt):
        return reflection_answer(prompt, draw_decision(rng), rng, PREFACE)
    if program_language(prompt) == TEXT_LANGUAGE:
        return text_edit_answer(prompt, program, rng)
    if program_language(prompt) == PLAYBOOK_LANGUAGE:
        return playbook_edit_answer(prompt, program, rng)
    try:
        mutation = mutate_program(program, rng)
    except EditError as exc:
        return f"{PREFACE}: {exc}."
    cited = citation_lines(prompt, rng)
    preface = f"{PREFACE}: {mutation.description}" + (f"\n{cited}" if cited else "")
    return render_answer(program, mutation, requested_format(prompt), preface)


def malformed_answer(prompt: str, rng: random.Random, variant: str | None = None) -> str:
    """An answer that parse_answer/apply_answer must reject, of a given or random variant."""
    variant = variant or rng.choice(MALFORMED_VARIANTS)
    if variant not in MALFORMED_VARIANTS:
        raise ValueError(f"unknown malformed variant {variant!r}; known: {MALFORMED_VARIANTS}")
    program = extract_program(prompt)
    preface = f"{PREFACE}: deliberately malformed answer ({variant})"
    if variant == "empty":
        return ""
    if variant == "garbled" or program is None:
        return f"{preface}.\n\n{rng.choice(_GARBLED)}\n"
    marker_line = next((ln for ln in program.splitlines() if START_MARKER in ln), None)
    if variant == "outside_block" and marker_line is not None:
        block = SearchReplace(f"{marker_line}\n", f"import os\n{marker_line}\n")
        return f"{preface}: an edit above the EVOLVE block.\n\n{render_diff([block])}"
    lines = [ln for ln in program.splitlines() if ln.strip() and START_MARKER not in ln]
    wrong = f"{rng.choice(lines)}  # as in the previous version" if lines else ""
    if not wrong or wrong in program:
        wrong = "this_line_is_not_in_the_program = True"
    block = SearchReplace(f"{wrong}\n", f"{wrong.split('  #')[0]}\n")
    return f"{preface}: a SEARCH text the program does not contain.\n\n{render_diff([block])}"
