"""One LLM call made for a candidate, with its cost charged to the candidate's node and the call
noted for its MLflow trace."""

from __future__ import annotations

import time

from evoforge.infra.llm.scheduler import QUERY, asking
from evoforge.infra.llm.types import Completion, LLMBackend, LLMError
from evoforge.infra.llm_traces import trace_call
from evoforge.infra.nodes import Node
from evoforge.stages.pipeline.run_view import RunView


async def ask_llm(ctx: RunView, node: Node, messages: list[dict[str, str]],
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
