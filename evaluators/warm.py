"""The warm sandbox: harness runs forked from a per-task fork server with the task's imports loaded.

A cold evaluation starts a fresh Python, which imports the harness, the evaluator's libraries
(numpy: ~100 ms) and the program's, every time. ``WARM.server_for(task)`` keeps one fork
server (evaluators/forkserver.py) per task folder in this process, started once with the
modules that the task's ``evaluator.py`` and program import (found by reading them, never by
running them: task-local modules are left to each child, which imports its own copy). Each
evaluation is a *fresh* child forked from it, confined exactly as a cold child is (own session,
cgroup, namespaces, dedicated uid, rlimits, scrubbed environment, private directory): only the
start-up is shared, never a candidate's state.

- **A change of the task's files** (any file's size or mtime) retires the server (it finishes
  the evaluations it runs) and the next evaluation starts a new one.
- **A crashed server** is replaced; the evaluation it was running is run again once, on the new
  one, and the retry is recorded on the result (``SandboxResult.retried``), then on the node.
- **A task that cannot be preloaded** (an import leaves a thread running, or the server does not
  start) runs cold, and ``describe()`` says why; so does ``sandbox.warm: false``.

Example::

    server = await WARM.server_for(task)          # None: run cold
    result = await run_sandboxed(harness_args, workdir, limits, launcher=server)
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from evoforge.evaluators.cgroup_pids import pids_cgroup_parent, process_limit_mechanism
from evoforge.evaluators.fork_client import COMPAT_DIR, ForkServer, PreloadThreaded, ServerGone
from evoforge.evaluators.io_threads import off_loop
from evoforge.evaluators.task import EVALUATOR, Task
from evoforge.infra.processes import own_cpu_s

__all__ = ["COMPAT_DIR", "WARM", "ForkServer", "ServerGone", "WarmPool", "fingerprint", "preload_modules"]

log = logging.getLogger(__name__)

MAX_SERVERS = 4  # fork servers kept at once in one process (least recently used retired first)


def preload_modules(task: Task) -> list[str]:
    """The absolute imports of the task's evaluator and program, but the task folder's own."""
    names: list[str] = []
    for path in (task.root / EVALUATOR, *(task.root / name for name in task.artifact.names())):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.append(node.module)
    local = {p.stem for p in task.root.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    return list(dict.fromkeys(n for n in names if n.split(".")[0] not in local))


def fingerprint(root: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file of the task folder with its size and mtime (a change restarts its server)."""
    found = []
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            path = os.path.join(base, name)
            with contextlib.suppress(OSError):
                stat = os.stat(path)
                found.append((os.path.relpath(path, root), stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(found))


class WarmPool:
    """The fork servers of this process, one per task folder, with what happened to them."""

    def __init__(self) -> None:
        self._servers: dict[Path, ForkServer] = {}
        self._cold: dict[Path, tuple[tuple, str]] = {}  # task root -> (fingerprint, why it runs cold)
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self._retired_cpu_s = 0.0

    async def server_for(self, task: Task) -> ForkServer | None:
        """The task's running fork server, started or replaced as needed; None: run it cold."""
        return await off_loop(self.find_server, task)

    def find_server(self, task: Task) -> ForkServer | None:
        """`server_for` on the calling thread (it reads the task folder; it may start a server)."""
        if not sys.platform.startswith("linux"):
            return None
        root = task.root.resolve()
        now = fingerprint(root)
        with self._lock:
            server = self._servers.get(root)
            if server is not None and server.fingerprint != now:
                self.counts["restarted_task_changed"] += 1
                log.info("sandbox: %s changed: its fork server restarts", root)
                self._drop(root)
                server = None
            elif server is not None and not server.alive():
                self.counts["restarted_crashed"] += 1
                log.warning("sandbox: %s; starting another", server.why_gone())
                self._drop(root)
                server = None
            if server is not None:
                server.used_at = time.monotonic()
                return server
            cold = self._cold.get(root)
            if cold is not None and cold[0] == now:
                return None
            server = self._start(task, root, now)
            if server is not None:
                self._servers[root] = server
                self._evict()
            return server

    def _start(self, task: Task, root: Path, now: tuple) -> ForkServer | None:
        preload = preload_modules(task)
        for _ in range(2):
            parent = pids_cgroup_parent() if process_limit_mechanism() == "cgroup-pids" else None
            server = ForkServer(root, now, preload, cgroup_parent=parent)
            try:
                server.boot()
                if server.failed_imports:  # each child imports them again, and fails as cold would
                    log.warning("sandbox: the fork server of %s could not preload %s", root,
                                "; ".join(f"{m} ({e})" for m, e in server.failed_imports.items()))
                self.counts["started"] += 1
                self._cold.pop(root, None)
                return server
            except PreloadThreaded as threaded:  # preload only what came before it
                log.warning("sandbox: importing %s starts a thread, so the fork server of %s does "
                            "not preload it or what follows it", threaded.module, root)
                preload = preload[: preload.index(threaded.module)]
            except ServerGone as exc:
                log.warning("sandbox: %s runs cold: %s", root, exc)
                self._cold[root] = (now, str(exc))
                return None
        self._cold[root] = (now, "its imports start threads")
        return None

    def _drop(self, root: Path) -> None:
        server = self._servers.pop(root, None)
        if server is not None:
            if server.proc is not None:
                self._retired_cpu_s += own_cpu_s(server.proc.pid)
            server.retire()

    def _evict(self) -> None:
        while len(self._servers) > MAX_SERVERS:
            oldest = min(self._servers.values(), key=lambda s: s.used_at)
            self._drop(oldest.root)

    def cpu_s(self) -> float:
        """CPU seconds the fork servers used themselves (forking, confining, relaying; the
        evaluations they forked are their children and are counted on the nodes)."""
        with self._lock:
            live = [s.proc.pid for s in self._servers.values() if s.proc is not None]
            gone = self._retired_cpu_s
        return gone + sum(own_cpu_s(pid) for pid in live)

    def note_retry(self) -> None:
        with self._lock:
            self.counts["retried_candidates"] += 1

    def close_all(self) -> None:
        """Stop every fork server and forget the counts (a run's end, after its last status; exit)."""
        with self._lock:
            for root in list(self._servers):
                self._drop(root)
            self._cold.clear()
            self.counts.clear()

    def describe(self, enabled: bool = True) -> dict[str, object]:
        """The warm sandbox in words and counts, for ``evoforge status``."""
        if not enabled:
            return {"warm": "off (sandbox.warm: false): every evaluation starts a fresh Python"}
        if not sys.platform.startswith("linux"):
            return {"warm": "off (not Linux): every evaluation starts a fresh Python"}
        with self._lock:
            colds = [why for _, why in self._cold.values()]
            preloaded = sorted({m for s in self._servers.values() for m in s.preload})
            counts = dict(self.counts)
        text = "on: each evaluation forks from a fork server with the task's imports loaded"
        if colds:
            text = f"cold for this task: {colds[0]}"
        return {"warm": text, "warm_preloaded": ", ".join(preloaded[:12]),
                "fork_servers": {k: counts.get(k, 0) for k in
                                 ("started", "restarted_task_changed", "restarted_crashed",
                                  "retried_candidates")}}


WARM = WarmPool()
atexit.register(WARM.close_all)
