"""One LLM call made for a candidate, with its cost charged to the candidate's node."""

from __future__ import annotations

import time

from evoforge.infra.llm.types import Completion, LLMError
from evoforge.infra.nodes import Node
from evoforge.stages.context import StageContext


async def ask_llm(ctx: StageContext, node: Node, messages: list[dict[str, str]]) -> Completion:
    """The run's LLM answer to `messages`, its seconds and tokens added to `node`; a failed call
    adds the seconds it took and raises its LLMError for the stage to record."""
    start = time.perf_counter()
    try:
        completion = await ctx.llm.complete(messages, temperature=ctx.config.llm.temperature,
                                            max_tokens=ctx.config.llm.max_tokens)
    except LLMError:
        node.llm_s += time.perf_counter() - start
        raise
    node.llm_s += completion.seconds
    node.tokens_in += completion.tokens_in
    node.tokens_out += completion.tokens_out
    return completion
