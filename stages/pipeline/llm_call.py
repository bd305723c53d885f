"""One LLM call made for a candidate, with its cost charged to the candidate's node and the call
noted for its MLflow trace."""

from __future__ import annotations

import time

from evoforge.infra.llm.scheduler import QUERY, asking
from evoforge.infra.llm.types import Completion, LLMBackend, LLMError
from evoforge.infra.llm_traces import note_call
from evoforge.infra.nodes import Node
from evoforge.stages.pipeline.authorship import answer_kind
from evoforge.stages.pipeline.context import StageContext


async def ask_llm(ctx: StageContext, node: Node, messages: list[dict[str, str]],
                  llm: LLMBackend | None = None, priority: int = QUERY,
                  rank: tuple[float, ...] = (), keep: int | None = None) -> Completion:
    """The answer of the run's LLM (or of `llm`) to `messages`, its seconds and tokens added to
    `node`; a failed call adds the seconds and tokens it took and raises its LLMError for the stage
    to record. The call waits for a slot of the run's scheduler at `priority` (infra/llm/scheduler.py:
    PROPOSE first, QUERY last), `rank` orders it within its priority and `keep` makes it refusable
    (SlotRefused: the time it waited is not charged to `node`)."""
    llm = llm or ctx.llm
    started_at, start = time.time(), time.perf_counter()
    try:
        with asking(priority, rank, keep):
            completion = await llm.complete(messages, temperature=ctx.config.llm.temperature,
                                            max_tokens=ctx.config.llm.max_tokens)
    except LLMError as exc:
        node.llm_s += time.perf_counter() - start
        node.tokens_in += exc.tokens_in  # the server's usage of an answer cut off or unusable
        node.tokens_out += exc.tokens_out
        trace_call(llm, messages, started_at, time.perf_counter() - start, error=str(exc))
        raise
    node.llm_s += completion.seconds
    node.tokens_in += completion.tokens_in
    node.tokens_out += completion.tokens_out
    trace_call(llm, messages, started_at, completion.seconds, completion)
    return completion


def trace_call(llm: LLMBackend, messages: list[dict[str, str]], started_at: float, seconds: float,
               completion: Completion | None = None, error: str | None = None) -> None:
    """Note a call to `llm` (answered, or failed with `error`) for its MLflow trace; outside a
    recording (a stage run, the plan agent's round) nothing is noted."""
    if completion is None:
        offline = llm.name == "offline"
        note_call(messages, answer="", backend=llm.name, model=llm.model,
                  author="offline" if offline else "unknown", tokens_in=0, tokens_out=0,
                  started_at=started_at, seconds=seconds, error=error)
        return
    note_call(messages, answer=completion.text, backend=completion.backend, model=completion.model,
              author=answer_kind(completion), tokens_in=completion.tokens_in,
              tokens_out=completion.tokens_out, started_at=started_at, seconds=seconds,
              attempts=completion.attempts)
