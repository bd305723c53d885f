"""The task model, from inside the sandbox: ``llm(messages)`` returns its answer, or raises.

A task whose ``task.yaml`` says ``task_model: true`` gets, in each sandboxed evaluation, one end of
a socket pair inherited as the descriptor named in ``EVOFORGE_TASK_MODEL_FD``: no key, no URL, no
network. The run's process holds the other end and answers each call through the run's task
model, where the key is added, the call counted and held to the money budget
(evoforge/evaluators/task_model_link.py). Stdlib only: the sandbox child imports it. ::

    from evoforge_channel import TaskModelError, llm

    try:
        answer = llm([{"role": "user", "content": "What is 17 + 25?"}])
    except TaskModelError as exc:     # refused (money budget spent), failed, timed out, no link
        answer = ""                   # the evaluation decides what a failed call means

Calls may come from several threads at once (the run bounds how many are in flight); each
message is one JSON line: ``{"id": n, "messages": [...], "max_tokens": n, "timeout_s": s}`` out,
``{"id": n, "text": "..."}`` or ``{"id": n, "error": "..."}`` back. The link belongs to the
process that opened it first: a forked child of the evaluation cannot use it.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

FD_ENV = "EVOFORGE_TASK_MODEL_FD"
__all__ = ["FD_ENV", "TaskModelError", "available", "llm", "llm_many"]


class TaskModelError(RuntimeError):
    """A call the run did not answer: refused, failed, timed out, or no link to the task model."""


class _Link:
    """One process's end of the link: requests written whole, replies read by whichever waiting
    thread gets there first and handed to the thread that asked."""

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.reader = self.sock.makefile("rb")
        self.ids = itertools.count(1)
        self.send_lock = threading.Lock()
        self.turn = threading.Condition()
        self.replies: dict[int, dict] = {}
        self.reading = False
        self.closed = False
        self.pid = os.getpid()

    def call(self, request: dict) -> dict:
        number = next(self.ids)
        line = json.dumps({"id": number, **request}).encode("utf-8") + b"\n"
        try:
            with self.send_lock:
                self.sock.sendall(line)
        except OSError as exc:
            raise TaskModelError(f"the link to the task model is closed ({exc})") from None
        with self.turn:
            while number not in self.replies:
                if self.closed:
                    raise TaskModelError("the link to the task model is closed")
                if self.reading:
                    self.turn.wait()
                    continue
                self.reading = True
                self.turn.release()
                try:
                    raw = self.reader.readline()
                finally:
                    self.turn.acquire()
                    self.reading = False
                if not raw:
                    self.closed = True
                else:
                    reply = json.loads(raw)
                    self.replies[int(reply.get("id") or 0)] = reply
                self.turn.notify_all()
            return self.replies.pop(number)


_lock = threading.Lock()
_link: _Link | None = None


def _current() -> _Link:
    global _link
    with _lock:
        if _link is None:
            fd = os.environ.get(FD_ENV, "")
            if not fd.isdigit():
                raise TaskModelError("no link to a task model in this evaluation (the task's task.yaml "
                                     "must say 'task_model: true', and the run must have an LLM)")
            _link = _Link(int(fd))
        if _link.pid != os.getpid():
            raise TaskModelError("the link to the task model belongs to the evaluation's first process")
        return _link


def available() -> bool:
    """True when this evaluation has a link to the task model."""
    return os.environ.get(FD_ENV, "").isdigit()


def llm(messages: Sequence[dict], *, max_tokens: int | None = None, timeout_s: float | None = None) -> str:
    """The task model's answer to chat ``messages`` (``[{"role": ..., "content": ...}]``); at most
    ``max_tokens`` tokens (default: the run's ``task_model.max_tokens``); the run gives up after
    ``timeout_s`` seconds (default: before the evaluation's own timeout). TaskModelError otherwise."""
    reply = _current().call({"messages": list(messages), "max_tokens": max_tokens, "timeout_s": timeout_s})
    if "text" in reply:
        return str(reply["text"])
    raise TaskModelError(str(reply.get("error") or "the task model did not answer"))


def llm_many(conversations: Sequence[Sequence[dict]], *, max_tokens: int | None = None,
             timeout_s: float | None = None, workers: int = 8) -> list[str | TaskModelError]:
    """``llm`` on each conversation, up to ``workers`` at once: the answers in order, a failed call's
    TaskModelError in its place."""

    def one(messages: Sequence[dict]) -> str | TaskModelError:
        try:
            return llm(messages, max_tokens=max_tokens, timeout_s=timeout_s)
        except TaskModelError as exc:
            return exc

    with ThreadPoolExecutor(max(1, min(workers, len(conversations) or 1))) as pool:
        return list(pool.map(one, conversations))
