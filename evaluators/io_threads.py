"""The sandbox's file work on threads of its own, never queued behind the flow's other threads.

An evaluation copies the task folder, reads its fingerprint for the warm sandbox, hands the copy
to the sandbox's uid and deletes it afterwards: a few ms of file system calls each. Through
``asyncio.to_thread`` they shared the event loop's default executor with the cognition base's
embeddings and retrievals (tens of ms each, several in flight at a fast LLM), and waited behind
them: inside a run, circle_packing's evaluation (25 ms alone) was recorded at 90 ms median.
Here they get a small pool of their own.

    workdir_ready = await off_loop(prepare, task, code, workdir)
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from evoforge.evaluators.eval_clock import current

__all__ = ["off_loop"]

T = TypeVar("T")
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="evoforge-sandbox-io")


async def off_loop(fn: Callable[..., T], /, *args: Any) -> T:
    """``fn(*args)`` on the sandbox's file-work threads (with the caller's context variables); the
    time the result then waits for the event loop counts as the running evaluation's loop wait."""
    context = contextvars.copy_context()
    value, ready_at = await asyncio.get_running_loop().run_in_executor(
        _POOL, functools.partial(context.run, _stamped, fn, *args))
    clock = current()
    if clock is not None:
        clock.waited(ready_at, time.monotonic())
    return value


def _stamped(fn: Callable[..., T], *args: Any) -> tuple[T, float]:
    value = fn(*args)
    return value, time.monotonic()
