"""Answers to plan prompts from the non-LLM answerers, in the plan agent's one-line-per-slot form.

The offline planner has no judgement: it keeps every slot and leaves retiring to the health rules.
The simulator mostly keeps, sometimes refreshes or retires a slot with a direction drawn from a
small list of ML ideas, and always retires a slot the prompt marks KILLED, so that runs over it
exercise every decision.
"""

from __future__ import annotations

import random

from evoforge.infra.prompt_format import parse_plan_slots

OFFLINE_PLANNER = "Offline planner (no LLM)"

_DIRECTIONS = (
    "switch to gradient-boosted trees with early stopping",
    "add target encoding of the categorical features",
    "stack a linear model on top of the tree ensemble",
    "try a small MLP with early stopping and weight decay",
    "use stratified k-fold cross-validation for model selection",
    "add pairwise feature interactions and log transforms",
    "bag the best model over several seeds",
    "reweight classes to handle the label imbalance",
    "drop low-importance features before training",
    "calibrate and post-process the predictions",
)


def offline_plan_answer(prompt: str, preface: str = OFFLINE_PLANNER) -> str:
    """Keep every slot: without an LLM only the health rules retire branches."""
    lines = [f"SLOT {s.slot}: keep" for s in parse_plan_slots(prompt)]
    return "\n".join([f"{preface}: no judgement without an LLM; every slot is kept and the kill "
                      f"criteria alone retire branches.", *lines]) + "\n"


def simulated_plan_answer(prompt: str, rng: random.Random, preface: str) -> str:
    """A seeded decision line for every slot of the prompt (and now and then a KILL line)."""
    slots = parse_plan_slots(prompt)
    shown = {s.hypothesis.lower() for s in slots}
    fresh = [d for d in _DIRECTIONS if d not in shown]
    rng.shuffle(fresh)
    lines = [f"{preface}: a seeded plan revision, not a real LLM's."]
    for s in slots:
        draw = rng.random()
        if (s.killed or draw >= 0.85) and fresh:
            lines.append(f"SLOT {s.slot}: retire: {fresh.pop()}")
        elif 0.7 <= draw < 0.85 and fresh:
            lines.append(f"SLOT {s.slot}: refresh: {fresh.pop()}")
        else:
            lines.append(f"SLOT {s.slot}: keep")
        if not s.killed and rng.random() < 0.15:
            lines.append(f"KILL {s.slot}: stall_rounds={rng.randint(2, 5)} "
                         f"invalid_rate={rng.choice((0.3, 0.5, 0.7))}")
    return "\n".join(lines) + "\n"
