"""A sandboxed evaluation's link to the task model: a socket pair whose far end the child inherits.

A program or files task that declares ``task_model: true`` may call the run's task model from
its evaluator or its candidate (``from evoforge_channel import llm``, evaluators/compat/). The
child gets no key, no URL and no network: only its end of a ``socketpair`` (the descriptor in
``EVOFORGE_TASK_MODEL_FD``). This process answers each request line on the other end through
the run's ``TaskModelClient`` (task_model_client.py): the key added here, the call counted in
the evaluation's usage (then the run's, in ``status.json`` ``task_model``) and held to the money
budget before it is sent. A call refused, failed, malformed or not answered in time gets an
``error`` line back (and counts as ``failed``), and the evaluation decides what that means. A
call left unanswered is given up at ``DEADLINE_SHARE`` of the evaluation's timeout (or the
caller's ``timeout_s``), so the error reaches the child before the sandbox kills it; at most
``MAX_PENDING`` calls of one evaluation wait at once, none is longer than ``task_model.max_tokens``
(a larger ``max_tokens`` is clamped), and one evaluation sends at most
``task_model.max_calls_per_eval`` calls: later ones are refused unsent, the reason goes back to the
child and the node counts them (``task_model_refused``, also in ``task_model_failed``). Example::

    async with open_link(task, limits.timeout_s) as link:   # None: the task declares none
        result = await run_sandboxed(argv, workdir, limits, task_model_fd=link.child_fd)
    link.usage.calls                                         # what this evaluation asked
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

from evoforge.evaluators.task import Task
from evoforge.evaluators.task_model_client import TaskModelClient, TaskModelUsage, client_of
from evoforge.infra.llm.circuit import LLMOutage
from evoforge.infra.llm.types import LLMError

log = logging.getLogger(__name__)

MAX_LINE = 4 * 2**20  # a request larger than this ends the link
MAX_PENDING = 64  # calls of one evaluation waiting at once; more are refused
MAX_TOKENS = 65536  # the most a request may name (it is clamped to task_model.max_tokens)
DEADLINE_SHARE = 0.9  # a call is given up at this share of the evaluation's timeout
ROLES = ("system", "user", "assistant", "developer")


class RequestError(ValueError):
    """A request line that is not a call the link can make."""


class TaskModelLink:
    """One evaluation's link: the child's end to hand over, the serving of this end, the usage."""

    def __init__(self, client: TaskModelClient, timeout_s: float) -> None:
        self.client = client
        self.usage = TaskModelUsage()
        self._timeout_s = timeout_s
        self._deadline = time.monotonic() + DEADLINE_SHARE * timeout_s
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        mine.setblocking(False)
        self._mine, self._theirs = mine, theirs
        self._calls: set[asyncio.Task[None]] = set()
        self._sent = 0  # calls let through to the client, for task_model.max_calls_per_eval
        self._write = asyncio.Lock()
        self._writer: asyncio.StreamWriter | None = None

    @property
    def child_fd(self) -> int:
        """The descriptor the child inherits (its end of the pair)."""
        return self._theirs.fileno()

    async def serve(self) -> None:
        """Answer request lines until the child's end closes, it sends a line over MAX_LINE (the
        link is closed: its calls fail at once), or this is cancelled."""
        reader, self._writer = await asyncio.open_unix_connection(sock=self._mine, limit=MAX_LINE)
        try:
            await self._serve(reader)
        finally:
            self._writer.close()

    async def _serve(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):  # a line over MAX_LINE: no more calls
                log.warning("task model link: a request over %d bytes; the link is closed", MAX_LINE)
                return
            except OSError:
                return
            if not line:
                return
            number, request = _parse(line)
            if isinstance(request, RequestError):
                self.usage.failed += 1
                await self._reply({"id": number, "error": f"malformed task model request: {request}"})
            elif len(self._calls) >= MAX_PENDING:
                self.usage.failed += 1
                await self._reply({"id": number, "error": f"too many task model calls at once (at most "
                                                          f"{MAX_PENDING} per evaluation): not sent"})
            elif self._sent >= self.client.max_calls_per_eval:
                self.usage.failed += 1
                self.usage.refused += 1
                await self._reply({"id": number, "error": f"task model call refused: this evaluation has "
                                                          f"made its {self.client.max_calls_per_eval} calls "
                                                          f"(task_model.max_calls_per_eval): not sent"})
            else:
                self._sent += 1
                call = asyncio.ensure_future(self._answer(number, request))
                self._calls.add(call)
                call.add_done_callback(self._calls.discard)

    async def _answer(self, number: int, request: dict[str, Any]) -> None:
        wait = self._deadline - time.monotonic()
        late = (f"not answered before the evaluation's deadline ({DEADLINE_SHARE:.0%} of its "
                f"{self._timeout_s:g} s timeout)")
        asked = request["timeout_s"]
        if asked is not None and asked < wait:
            wait, late = asked, f"not answered within its timeout_s ({asked:g} s)"
        try:
            async with asyncio.timeout(max(wait, 0.0)):
                text = await self.client.ask(request["messages"], self.usage, request["max_tokens"])
            reply: dict[str, Any] = {"id": number, "text": text}
        except LLMError as exc:  # refused for the money budget, or failed after its retries
            self.usage.failed += 1
            reply = {"id": number, "error": f"task model call failed: {exc}"}
        except TimeoutError:
            self.usage.failed += 1
            reply = {"id": number, "error": f"task model call {late}"}
        except LLMOutage as exc:  # down past give_up_s (the engine paused the run): the evaluation decides
            log.error("task model down: a sandboxed call gets an error (%s)", exc)
            self.usage.failed += 1
            reply = {"id": number, "error": f"task model down: {exc}"}
        await self._reply(reply)

    async def _reply(self, reply: dict[str, Any]) -> None:
        writer = self._writer
        if writer is None or writer.is_closing():
            return
        async with self._write:
            with contextlib.suppress(OSError):  # the child is gone: nobody reads the answer
                writer.write(json.dumps(reply).encode("utf-8") + b"\n")
                await writer.drain()

    async def close(self) -> None:
        """Stop answering, close both ends and add this evaluation's usage to the run's."""
        for call in list(self._calls):
            call.cancel()
        if self._calls:
            await asyncio.wait(self._calls)
        if self._writer is not None:
            self._writer.close()
        else:
            self._mine.close()
        self._theirs.close()
        self.client.usage.add(self.usage)


@contextlib.asynccontextmanager
async def open_link(task: Task, timeout_s: float) -> AsyncIterator[TaskModelLink | None]:
    """A served link for one evaluation of `task`; None when the task declares no task model or
    this process has none attached for it (the child's calls then fail: no link)."""
    client = client_of(task) if task.calls_task_model else None
    if client is None:
        yield None
        return
    link = TaskModelLink(client, timeout_s)
    serving = asyncio.ensure_future(link.serve())
    try:
        yield link
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        await link.close()


def _parse(line: bytes) -> tuple[int | None, dict[str, Any] | RequestError]:
    """(the request's id, the request checked) or (its id if readable, why it is malformed)."""
    try:
        raw = json.loads(line)
    except (UnicodeDecodeError, ValueError):
        return None, RequestError("not a JSON line")
    if not isinstance(raw, dict):
        return None, RequestError("not a JSON object")
    number = raw.get("id")
    number = number if isinstance(number, int) and not isinstance(number, bool) else None
    messages = raw.get("messages")
    if (not isinstance(messages, list) or not messages
            or not all(isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)
                       for m in messages)):
        return number, RequestError(f"'messages' must be a non-empty list of {{role, content}} "
                                    f"(roles: {', '.join(ROLES)})")
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                   or not 1 <= max_tokens <= MAX_TOKENS):
        return number, RequestError(f"'max_tokens' must be a whole number from 1 to {MAX_TOKENS}")
    timeout = raw.get("timeout_s")
    if timeout is not None and (not isinstance(timeout, int | float) or isinstance(timeout, bool)
                                or not math.isfinite(timeout) or timeout <= 0):
        return number, RequestError("'timeout_s' must be a positive number of seconds")
    clean = [{"role": m["role"], "content": m["content"]} for m in messages]
    return number, {"messages": clean, "max_tokens": max_tokens, "timeout_s": timeout}
