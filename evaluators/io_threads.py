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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["off_loop"]

T = TypeVar("T")
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="evoforge-sandbox-io")


async def off_loop(fn: Callable[..., T], /, *args: Any) -> T:
    """``fn(*args)`` on the sandbox's file-work threads (with the caller's context variables)."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(context.run, fn, *args))
