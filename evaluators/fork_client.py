"""The client of one fork server (forkserver.py): start it, hand it children, notice its death.

``ForkServer.boot()`` starts the server with a scrubbed environment and the modules to preload;
``start(spec)`` (the sandbox's launcher contract, launch.py) hands it a child's request with
the child's pipes, and returns a ``WarmChild`` watched through its reply socket: the pid at
once, the exit status when the server reaps it, or EOF when the server died (``lost``, with how
it ended and the last line of its stderr). evaluators/warm.py keeps one per task folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from evoforge.evaluators import isolation
from evoforge.evaluators.cgroup_pids import PidsCgroup
from evoforge.evaluators.eval_clock import current
from evoforge.evaluators.forkserver import MAX_MESSAGE
from evoforge.evaluators.io_threads import off_loop
from evoforge.evaluators.launch import ChildSpec, Running, child_env
from evoforge.evaluators.sandbox_io import _Tail
from evoforge.evaluators.task import EVALUATOR
from evoforge.infra.processes import wait_or_kill

COMPAT_DIR = Path(__file__).resolve().parent / "compat"
_START_TIMEOUT_S = 120.0
_REPLY_TIMEOUT_S = 30.0
_SERVE = "import sys; from evoforge.evaluators.forkserver import serve; serve(int(sys.argv[1]), sys.argv[2])"
# pyarrow (pandas, sklearn import it) starts a jemalloc background thread, and a threaded
# process cannot fork safely: the server's allocator runs without it
_SERVER_ENV = {"JE_ARROW_MALLOC_CONF": "background_thread:false"}
_TOKEN_ENV = "EVOFORGE_REAPER_TOKEN"  # infra/reaper.py's mark: the watchdog stops a server it finds


class ServerGone(RuntimeError):
    """The fork server died or stopped answering before the child was started."""


class _PipeTail(asyncio.Protocol):
    """Keeps the tail of one of a warm child's output pipes; ``closed`` at its EOF."""

    def __init__(self, size: int, closed: asyncio.Future[None]) -> None:
        self.tail, self.done = _Tail(size), closed

    def data_received(self, data: bytes) -> None:
        self.tail.add(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


class WarmChild:
    """A child of a fork server, watched through its reply socket and its output pipes."""

    def __init__(self, server: ForkServer, reply: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self.server, self.reply, self.pid = server, reply, 0
        self.lost: str | None = None
        self.cgroup: PidsCgroup | None = None
        self._code: int | None = None
        self.exited_at: float | None = None  # the server's monotonic stamp of the child's reaping
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._pipes: list[tuple[asyncio.BaseTransport, _PipeTail]] = []
        self._watch: asyncio.Task | None = None
        self._closed = False

    async def attach(self, fds: list[int], output_bytes: int) -> None:
        """Read the child's stdout and stderr (``fds``: each is set to -1 once a pipe owns it)."""
        loop = asyncio.get_running_loop()
        both = [loop.create_future(), loop.create_future()]
        for i, done in enumerate(both):
            pipe, fds[i] = os.fdopen(fds[i], "rb", buffering=0), -1  # closed by its transport now
            self._pipes.append(await loop.connect_read_pipe(lambda d=done: _PipeTail(output_bytes, d), pipe))
        asyncio.gather(*both).add_done_callback(lambda _: _resolve(self.closed))

    async def started(self) -> None:
        """Wait for the server to say the child's pid, then watch for its exit; cancelled
        meanwhile, still learn the pid and kill the child (it runs already), then re-raise."""
        answer = asyncio.ensure_future(self._started())
        try:
            await asyncio.shield(answer)
        except asyncio.CancelledError:
            await asyncio.wait({answer})
            if not answer.cancelled() and answer.exception() is None:
                self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL the child's process group (its session) and its pids cgroup."""
        if self.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill_all()

    async def _started(self) -> None:
        message = await self._next()
        if message is None or "pid" not in message:
            self.close()
            error = (message or {}).get("error")
            why = f"{error}{self.server.stderr_hint()}" if error else self.server.why_gone()
            raise ServerGone(f"the fork server did not start the child: {why}")
        self.pid = int(message["pid"])
        clock = current()
        if clock is not None:
            clock.mark("pid_seen")
        if message.get("cgroup"):
            self.cgroup = PidsCgroup(Path(message["cgroup"]))
        self._watch = asyncio.ensure_future(self._wait_exit())

    async def _wait_exit(self) -> None:
        try:
            message = await self._next(wait_s=None)
            if message is not None and "exit" in message:
                self._code = int(message["exit"])
                at = message.get("at")
                self.exited_at = float(at) if isinstance(at, int | float) else None
            else:  # its sockets close as it dies: give the kernel a moment to say how
                self.lost = await off_loop(self.server.why_gone, 2.0)
        finally:
            _resolve(self.exited)

    async def _next(self, wait_s: float | None = _REPLY_TIMEOUT_S) -> dict | None:
        loop = asyncio.get_running_loop()
        try:  # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancel that meets the reply
            async with asyncio.timeout(wait_s):
                data = await loop.sock_recv(self.reply, MAX_MESSAGE)
        except (TimeoutError, OSError):
            return None
        return json.loads(data) if data else None

    def returncode(self) -> int | None:
        return self._code

    def tails(self) -> tuple[str, str]:
        return tuple(protocol.tail.text() for _, protocol in self._pipes) or ("", "")  # type: ignore[return-value]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watch is not None and not self._watch.done():
            self._watch.cancel()
        for transport, _ in self._pipes:
            transport.close()
        self.reply.close()
        self.server.release()


@dataclass
class ForkServer:
    """One fork server process for one task folder (see the module doc)."""

    root: Path
    fingerprint: tuple
    preload: list[str]
    proc: subprocess.Popen | None = None
    control: socket.socket | None = None
    failed_imports: dict[str, str] = field(default_factory=dict)
    active: int = 0
    retired: bool = False
    used_at: float = 0.0
    cgroup_parent: Path | None = None  # where the server makes its children's pids cgroups
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _log_path: Path | None = None

    @property
    def makes_cgroup(self) -> bool:
        return self.cgroup_parent is not None

    def boot(self) -> None:
        """Start the server and preload its modules (blocking: call it off the event loop)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        scratch = isolation.scratch_root()
        self._log_path = scratch / f"forkserver-{os.getpid()}-{id(self):x}.log"
        env = {**child_env(scratch, None), **_SERVER_ENV}
        if _TOKEN_ENV in os.environ:
            env[_TOKEN_ENV] = os.environ[_TOKEN_ENV]
        if "PYTHONPATH" in os.environ:  # the server runs the client's evoforge, not another install's
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        with open(self._log_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE, str(theirs.fileno()), str(COMPAT_DIR)],
                pass_fds=(theirs.fileno(),), env=env, cwd=scratch, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
        theirs.close()
        self.control = mine
        mine.settimeout(_START_TIMEOUT_S)
        try:
            mine.send(json.dumps({"preload": self.preload, "precompile": [str(self.root / EVALUATOR)],
                                  "cgroup_parent": str(self.cgroup_parent) if self.cgroup_parent else None,
                                  "userns": isolation.availability().kind == "userns"}).encode())
            data = mine.recv(MAX_MESSAGE)
        except OSError as exc:
            self.close()
            raise ServerGone(f"the fork server did not start: {exc}; {self.why_gone()}") from exc
        hello = json.loads(data) if data else {}
        if not hello.get("ready"):
            self.close()
            if "threads_after" in hello:
                raise PreloadThreaded(hello["threads_after"])
            raise ServerGone(f"the fork server did not start: {self.why_gone()}")
        self.failed_imports = hello.get("failed", {})
        mine.settimeout(None)
        self.used_at = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.control is not None

    def why_gone(self, wait_s: float = 0.0) -> str:
        """How the server ended, waiting up to ``wait_s`` for it to be reaped."""
        code = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=wait_s) if wait_s else self.proc.poll()
        state = f"exit code {code}" if code is not None else "no answer"
        if code is not None and code < 0:
            state = f"killed by signal {-code}"
        pid = self.proc.pid if self.proc is not None else "?"
        return f"the fork server (pid {pid}) is gone: {state}{self.stderr_hint()}"

    def stderr_hint(self) -> str:
        """The last line the server (or a spare child of it) wrote on its stderr, as a hint."""
        if self._log_path is None:
            return ""
        with contextlib.suppress(OSError):
            lines = self._log_path.read_text(errors="replace").strip().splitlines()
            return f"; last stderr line: {lines[-1][:300]}" if lines else ""
        return ""

    async def start(self, spec: ChildSpec) -> Running:
        """Have the server start a child for ``spec`` (harness arguments in ``spec.argv``): its
        spare, forked ahead and waiting in its own pids cgroup, or a child forked now."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mine.setblocking(False)
        request = {"argv": spec.argv, "workdir": str(spec.workdir), "env": spec.env,
                   "rlimits": spec.rlimits, "plan": spec.plan.to_json() if spec.plan else None,
                   "max_procs": spec.max_procs, "task_model": spec.task_model_fd is not None}
        fds = [theirs.fileno(), out_w, err_w, spec.result_fd]
        if spec.task_model_fd is not None:
            fds.append(spec.task_model_fd)
        if spec.procs_fd is not None:
            fds.append(spec.procs_fd)
        with self._lock:
            self.active += 1
            self.used_at = time.monotonic()
        child = WarmChild(self, mine)
        try:
            try:
                with self._lock:
                    if not self.alive():
                        raise ServerGone(self.why_gone())
                    socket.send_fds(self.control, [json.dumps(request).encode()], fds)  # type: ignore[arg-type]
                clock = current()
                if clock is not None:  # the child runs from here (the server hands it to its spare)
                    clock.launched = time.monotonic()
            except OSError as exc:
                raise ServerGone(f"{self.why_gone()} ({exc})") from exc
            finally:
                for fd in (out_w, err_w):
                    os.close(fd)
                theirs.close()
            pipes = [out_r, err_r]
            try:
                await child.attach(pipes, spec.output_bytes)
            finally:
                out_r, err_r = pipes
            await child.started()
        except BaseException:
            for fd in (out_r, err_r):
                if fd >= 0:
                    os.close(fd)
            child.close()
            raise
        return child

    def release(self) -> None:
        """One evaluation of this server ended; a retired server closes after its last."""
        with self._lock:
            self.active -= 1
            last = self.retired and self.active <= 0
        if last:
            self.close()

    def retire(self) -> None:
        with self._lock:
            self.retired = True
            idle = self.active <= 0
        if idle:
            self.close()

    def close(self) -> None:
        """Close the control socket: the server kills what it still runs and exits."""
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.proc is not None:
            wait_or_kill(self.proc)
        if self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()


class PreloadThreaded(Exception):
    """Importing this module left a thread running in the fork server."""

    def __init__(self, module: str) -> None:
        super().__init__(module)
        self.module = module


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
