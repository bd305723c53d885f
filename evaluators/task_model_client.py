"""The run's client of its task model: one counted, bounded call at a time, held to the money budget.

A task scored with a task model reaches it through one ``TaskModelClient`` per run: a text task's
``TaskChannel`` (task_model.py) is one, and so is the client a program or files task that
declares ``task_model: true`` gets, whose sandboxed evaluations call it over their link
(task_model_link.py). Every call goes to the task model's endpoint (``task_model.llm``, default
the proposer's), at most ``task_model.concurrency`` at once over the whole run, and is counted
(calls, tokens, seconds, dollars) apart from the proposer's, none longer than
``task_model.max_tokens``; the backend checks the money budget
(``budget.max_cost_usd``) before it sends a call and refuses it once the budget is spent.
``attach_channel`` makes a client the one this process's evaluations of a task use::

    client = TaskModelClient(backend, concurrency=8, max_tokens=256, temperature=0.0, prices={})
    attach_channel(task, client)
    usage = TaskModelUsage()
    text = await client_of(task).ask([{"role": "user", "content": "2 + 2?"}], usage)
    client.usage.add(usage)  # the run's total, once the evaluation is over
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from evoforge.evaluators.task import Task
from evoforge.infra.config import ModelPrice, TaskModelConfig
from evoforge.infra.failure_reasons import TRUNCATED
from evoforge.infra.llm.pricing import call_cost
from evoforge.infra.llm.types import LLMBackend, LLMError, cut_answers_kept

DEFAULT_MAX_CALLS: int = TaskModelConfig.model_fields["max_calls_per_eval"].default


@dataclass
class TaskModelUsage:
    """What the task model's calls cost: counted per evaluation and for the run."""

    calls: int = 0
    cached: int = 0
    failed: int = 0
    refused: int = 0  # of the failed: over the evaluation's task_model.max_calls_per_eval
    truncated: int = 0  # answers cut off at task_model.max_tokens: the prompt's answer, scored as empty
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0

    def add(self, other: TaskModelUsage) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}

    def metrics(self) -> dict[str, float]:
        """The usage as a node's metrics (`task_model_calls`, ...), recorded with its evaluation."""
        return {f"task_model_{k}": float(v) for k, v in self.as_dict().items()}


class TaskModelClient:
    """The run's way to its task model: the backend, the bound on calls at once, the run's meters."""

    def __init__(self, backend: LLMBackend, *, concurrency: int, max_tokens: int, temperature: float,
                 prices: Mapping[str, ModelPrice], max_calls_per_eval: int = DEFAULT_MAX_CALLS) -> None:
        self.backend = backend
        self.max_tokens, self.temperature, self.prices = max_tokens, temperature, prices
        self.max_calls_per_eval = max_calls_per_eval  # a sandboxed evaluation's calls (task_model_link.py)
        self.concurrency = concurrency
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self.usage = TaskModelUsage()  # the run's, over every evaluation

    async def ask(self, messages: list[dict[str, str]], usage: TaskModelUsage,
                  max_tokens: int | None = None) -> str:
        """The task model's answer to `messages`, counted in `usage` (an evaluation's), at most
        `task_model.max_tokens` long whatever `max_tokens` asks; LLMError when the call failed or
        was refused (the money budget is spent), counted by the caller. An answer cut off at
        `max_tokens` is no failure: the task model rambled, which is the prompt's doing, so the cut
        text is the answer (not asked again with more room), and the evaluator scores it."""
        limit = min(max_tokens or self.max_tokens, self.max_tokens)
        try:
            async with self._slots_here():  # the backend holds the call to the money budget first
                with cut_answers_kept():  # a cut-off answer is the answer: not retried with more room
                    completion = await self.backend.complete(messages, temperature=self.temperature,
                                                             max_tokens=limit)
        except LLMError as exc:
            if exc.reason != TRUNCATED:  # a backend that cannot keep a cut answer: an empty one
                raise
            usage.truncated += 1
            self._count(usage, exc.model, exc.tokens_in, exc.tokens_out, 0.0)
            return ""
        usage.truncated += completion.cut_off
        self._count(usage, completion.model, completion.tokens_in, completion.tokens_out, completion.seconds)
        return completion.text

    def _count(self, usage: TaskModelUsage, model: str, tokens_in: int, tokens_out: int,
               seconds: float) -> None:
        """One answered call (whole or cut off) in `usage`: its tokens, seconds and price."""
        usage.calls += 1
        usage.tokens_in += tokens_in
        usage.tokens_out += tokens_out
        usage.seconds += seconds
        usage.cost_usd += call_cost(self.prices, model, tokens_in, tokens_out) or 0.0

    def _slots_here(self) -> asyncio.Semaphore:
        """The bound on calls at once, for the running event loop (a semaphore is a loop's own)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.concurrency))
        return self._slots[1]


_CLIENTS: dict[str, TaskModelClient] = {}


def attach_channel(task: Task, client: TaskModelClient) -> None:
    """Make `client` the way this process's evaluations of `task` reach its task model."""
    _CLIENTS[str(task.root)] = client


def client_of(task: Task) -> TaskModelClient | None:
    """The client attached for `task` in this process; None when the run attached none."""
    return _CLIENTS.get(str(task.root))
