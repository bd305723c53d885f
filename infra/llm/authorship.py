"""Who wrote an answer: a real LLM, the offline backend, or the LLM simulator (never confused).

A stage that keeps an answer's text (the Analyzer's report, the judge's note) says which of the
three wrote it, so offline or simulated text is never presented as an LLM's.
"""

from __future__ import annotations

from evoforge.infra.llm.types import Completion
from evoforge.infra.llm_sim.answers import PREFACE as SIMULATED_PREFACE

OFFLINE, SIMULATED, LLM = "offline", "simulated", "llm"
LESSONS_BY = "lessons_by"  # node.artifacts key: who wrote the node's lessons (only an LLM's are shared)


def answer_kind(completion: Completion) -> str:
    """OFFLINE (the offline backend), SIMULATED (evoforge's LLM simulator) or LLM."""
    if completion.backend == "offline":
        return OFFLINE
    if completion.text.lstrip().startswith(SIMULATED_PREFACE):
        return SIMULATED
    return LLM


def answer_label(completion: Completion) -> str:
    """One word for a header: "LLM", "Offline" or "Simulated"."""
    return {OFFLINE: "Offline", SIMULATED: "Simulated", LLM: "LLM"}[answer_kind(completion)]


def answer_author(completion: Completion, role: str) -> str:
    """A phrase naming who wrote the answer, e.g. "an LLM (openai backend, model qwen)".

    >>> answer_author(Completion("x", "offline-mutator", "offline", 0, 0, 0.0), "analyzer")
    'the offline analyzer (no LLM; computed from the facts in the prompt, not an LLM judgement)'
    """
    kind = answer_kind(completion)
    if kind == OFFLINE:
        return f"the offline {role} (no LLM; computed from the facts in the prompt, not an LLM judgement)"
    if kind == SIMULATED:
        return (f"the LLM simulator (evoforge llm-sim, model {completion.model or 'unknown'}): "
                f"simulated text, not a real LLM's")
    return f"an LLM ({completion.backend} backend, model {completion.model or 'unknown'})"
