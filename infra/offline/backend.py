"""The offline proposer: an LLM backend that answers with real mutations instead of an LLM (and
with a mechanical report to an analysis prompt, no score to a judge prompt, and every slot kept
to a plan prompt)."""

from __future__ import annotations

import random
import time

from evoforge.infra.evolve_block import EditError
from evoforge.infra.llm.types import Completion, LLMError
from evoforge.infra.offline.analysis import offline_analysis
from evoforge.infra.offline.answer import render_answer
from evoforge.infra.offline.judge_answer import offline_judge_answer
from evoforge.infra.offline.mutate import mutate_program
from evoforge.infra.offline.plan_answer import offline_plan_answer
from evoforge.infra.offline.reflection import reflection_answer
from evoforge.infra.prompt_format import (
    PROGRAM_HEADER,
    extract_program,
    is_analysis_prompt,
    is_judge_prompt,
    is_plan_prompt,
    is_reflection_prompt,
    requested_format,
)

PREFACE = "Offline proposer (no LLM)"


class OfflineBackend:
    """Answers a research prompt with a mutated program, in the diff or rewrite form it asks for.

    >>> import asyncio
    >>> from evoforge.infra.prompt_format import render_program_section
    >>> prompt = render_program_section("x = 0.5\\n") + "Answer format: diff"
    >>> answer = asyncio.run(OfflineBackend(seed=1).complete(
    ...     [{"role": "user", "content": prompt}], temperature=1.0, max_tokens=1000))
    >>> answer.text.startswith("Offline proposer (no LLM): ")
    True
    """

    name = "offline"
    model = "offline-mutator"

    def __init__(self, seed: int = 0, max_edits: int = 3) -> None:
        self._rng = random.Random(seed)
        self._max_edits = max_edits

    async def complete(
        self, messages: list[dict[str, str]], *, temperature: float, max_tokens: int
    ) -> Completion:
        """One mutation of the program in the last user message, written as an LLM answer (an
        analysis prompt gets the offline analyzer's report, a judge prompt an answer with no score, a
        plan prompt every slot kept).

        ``temperature`` and ``max_tokens`` are part of the interface and have no effect here.
        """
        started = time.perf_counter()
        prompt = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        if is_analysis_prompt(prompt):
            return self._completion(offline_analysis(prompt), started)
        if is_judge_prompt(prompt):
            return self._completion(offline_judge_answer(), started)
        if is_plan_prompt(prompt):
            return self._completion(offline_plan_answer(prompt), started)
        program = extract_program(prompt)
        if program is None:
            raise LLMError(f"offline proposer: the prompt carries no '{PROGRAM_HEADER}' section")
        if is_reflection_prompt(prompt):  # no judgement without an LLM: rebase onto the best
            return self._completion(reflection_answer(prompt, "patch", self._rng, PREFACE), started)
        try:
            mutation = mutate_program(program, self._rng, max_edits=self._max_edits)
        except EditError as exc:
            raise LLMError(f"offline proposer: {exc}") from None
        text = render_answer(
            program, mutation, requested_format(prompt), f"{PREFACE}: {mutation.description}"
        )
        return self._completion(text, started)

    def _completion(self, text: str, started: float) -> Completion:
        """``text`` as this backend's answer: no tokens, the seconds since ``started``."""
        return Completion(text=text, model=self.model, backend=self.name, tokens_in=0,
                          tokens_out=0, seconds=time.perf_counter() - started)

    def observe(self, model: str, gain: float | None) -> None:
        """No choice of model, nothing to learn from the feedback."""

    async def close(self) -> None:
        """Nothing to release."""
