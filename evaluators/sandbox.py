"""Run an untrusted command in a resource-limited, environment-scrubbed subprocess.

The child gets a private working directory, a scrubbed environment (no API keys), rlimits on
memory, CPU time and file size, and a process limit: a per-run ``pids`` cgroup when running as
root (root ignores RLIMIT_NPROC), else RLIMIT_NPROC. Its result travels on a dedicated pipe whose
descriptor number is in ``EVOFORGE_RESULT_FD``; stdout and stderr are only kept as tails. The
pipe is read either whole (one JSON object, the default) or as JSON lines handed to an ``on_line``
hook as they arrive; the hook returning False kills the run at once (``stopped=True``).

This limits accidents (infinite loops, memory or fork bombs, crashes), not a determined attacker:
a root child can still leave its cgroup. Example::

    result = await run_sandboxed([sys.executable, "-c", "print(1)"], workdir, SandboxLimits())
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import math
import os
import resource
import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evoforge.evaluators.cgroup_pids import PidsCgroup, pids_cgroup_parent, process_limit_mechanism

# LanceDB (the cognition base) warns at every fork; a sandbox child execs a fresh Python at once
# and never touches LanceDB's runtime, so the warning says nothing about it
warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)

# the child dies with the thread that started it (e.g. a Dask worker killed mid-evaluation),
# instead of living on as an orphan that nobody times out: prctl(PR_SET_PDEATHSIG, SIGKILL)
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1
_PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
_READER_GRACE_S = 2.0
_SIGNAL_CAUSES = {
    "SIGSEGV": " (segmentation fault)",
    "SIGBUS": " (bus error)",
    "SIGABRT": " (aborted)",
    "SIGFPE": " (arithmetic error)",
    "SIGXFSZ": " (file size limit exceeded)",
    "SIGKILL": " (killed from outside, e.g. by the OOM killer)",
}


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    timeout_s: float = 60.0
    memory_mb: int = 2048
    cpu_s: int | None = None
    max_procs: int = 64
    max_file_mb: int = 256
    output_bytes: int = 65536

    def cpu_seconds(self) -> int:
        """The RLIMIT_CPU value: ``cpu_s``, or twice the timeout rounded up."""
        return self.cpu_s if self.cpu_s is not None else max(1, math.ceil(2 * self.timeout_s))


@dataclass
class SandboxResult:
    """What a sandboxed run produced and how it ended."""

    returncode: int | None
    timed_out: bool
    seconds: float
    stdout_tail: str
    stderr_tail: str
    payload: dict | None
    signal_name: str | None
    limits: SandboxLimits | None = None
    process_limit: str = "none"
    stopped: bool = False  # streaming: the line hook asked to stop, or a line was unreadable
    stream_error: str | None = None  # streaming: why the stream was unreadable

    def describe_failure(self, note: str = "", missing: str = "a result") -> str | None:
        """A one-paragraph reason (``note`` follows it), or None after an exit 0 with a payload."""
        if self.timed_out:
            limit = self.limits.timeout_s if self.limits else self.seconds
            return f"timed out after {limit:.1f} s{note}" + self._stderr_hint()
        if self.signal_name:
            return f"killed by {self.signal_name}{self._signal_cause()}{note}" + self._stderr_hint()
        if self.returncode == 0 and self.payload is not None:
            return None
        if self.returncode == 0:
            reason = f"exited with code 0 without writing {missing} (os._exit or a killed harness?)"
        else:
            reason = f"exited with code {self.returncode} without writing {missing}"
        return reason + note + self._stderr_hint()

    def _signal_cause(self) -> str:
        if self.signal_name == "SIGXCPU" and self.limits:
            return f" (CPU time limit of {self.limits.cpu_seconds()} s exceeded)"
        return _SIGNAL_CAUSES.get(self.signal_name or "", "")

    def _stderr_hint(self) -> str:
        lines = [line.strip() for line in self.stderr_tail.splitlines() if line.strip()]
        return f"; last stderr line: {lines[-1][:300]}" if lines else ""


def _child_env(workdir: Path, extra: dict[str, str] | None, result_fd: int) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASSTHROUGH_ENV if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        HOME=str(workdir),
        TMPDIR=str(workdir),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    env.update(extra or {})
    env["EVOFORGE_RESULT_FD"] = str(result_fd)
    return env


def _user_process_count() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def _rlimits(limits: SandboxLimits, nproc: int | None) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) triples, clamped to the hard limits we already have."""
    cpu = limits.cpu_seconds()
    wanted = [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, limits.max_file_mb * 2**20, limits.max_file_mb * 2**20),
        *([(resource.RLIMIT_NPROC, nproc, nproc)] if nproc is not None else []),
        (resource.RLIMIT_AS, limits.memory_mb * 2**20, limits.memory_mb * 2**20),  # last
    ]
    out = []
    for res, soft, hard in wanted:
        cap = resource.getrlimit(res)[1]
        if cap != resource.RLIM_INFINITY:
            soft, hard = min(soft, cap), min(hard, cap)
        out.append((res, soft, hard))
    return out


def _make_preexec(rlimits: list[tuple[int, int, int]], procs_fd: int | None) -> Callable[[], None]:
    """The child-side hook run between fork and exec: die with the parent, join the cgroup, then
    set rlimits."""
    parent = os.getpid()

    def preexec() -> None:
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the parent died before the line above: die now
                os._exit(1)
        if procs_fd is not None:
            os.write(procs_fd, str(os.getpid()).encode())
        for res, soft, hard in rlimits:
            resource.setrlimit(res, (soft, hard))

    return preexec


class _Tail:
    """Keeps the last ``size`` bytes of a stream."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.size:
            del self.data[: len(self.data) - self.size]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class _ChildProtocol(asyncio.SubprocessProtocol):
    """Collects stdout/stderr tails and signals the child's exit and the pipes' closing."""

    def __init__(self, output_bytes: int) -> None:
        loop = asyncio.get_running_loop()
        self.tails = {1: _Tail(output_bytes), 2: _Tail(output_bytes)}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.tails[fd].add(data)

    def process_exited(self) -> None:
        _resolve(self.exited)

    def connection_lost(self, exc: Exception | None) -> None:
        _resolve(self.closed)


class _ResultProtocol(asyncio.Protocol):
    """Reads the result pipe to EOF (at most the payload cap), or line by line into ``on_line``."""

    def __init__(self, on_line: Callable[[dict], bool] | None = None) -> None:
        self.data = bytearray()
        self.overflow = False
        self.on_line = on_line
        self.stream_error: str | None = None
        self.hook_error: BaseException | None = None
        loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.stop: asyncio.Future[None] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        if self.stop.done():
            return
        if len(self.data) + len(data) > _MAX_PAYLOAD_BYTES:
            self.overflow = True
            self._halt("a result line is larger than the payload cap")
        else:
            self.data += data
        if self.on_line is not None and b"\n" in data:
            *lines, rest = bytes(self.data).split(b"\n")
            self.data = bytearray(rest)
            for line in lines:
                self._deliver(line)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.on_line is not None:
            self._deliver(bytes(self.data))  # a last line without its newline
        _resolve(self.closed)

    def _deliver(self, line: bytes) -> None:
        if self.stop.done() or not line.strip():
            return
        value = _parse_json(line)
        if not isinstance(value, dict):
            self._halt(f"unreadable result line: {line[:200].decode('utf-8', 'replace')!r}")
            return
        try:
            keep_going = self.on_line(value)  # type: ignore[misc]
        except BaseException as exc:  # re-raised by run_sandboxed once the child is dead
            self.hook_error = exc
            keep_going = False
        if keep_going is False:
            _resolve(self.stop)

    def _halt(self, reason: str) -> None:
        if self.on_line is not None:
            self.stream_error = reason
            _resolve(self.stop)

    def payload(self) -> dict | None:
        if self.on_line is not None or self.overflow or not self.data:
            return None
        value = _parse_json(bytes(self.data))
        return value if isinstance(value, dict) else None


def _parse_json(data: bytes) -> object:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _kill_group(pgid: int, cgroup: PidsCgroup | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all()


async def run_sandboxed(
    argv: list[str],
    workdir: Path,
    limits: SandboxLimits,
    env: dict[str, str] | None = None,
    on_line: Callable[[dict], bool] | None = None,
) -> SandboxResult:
    """Run ``argv`` in ``workdir`` under ``limits`` and collect its result pipe and output tails.

    With ``on_line``, each JSON-object line of the result pipe is passed to it as it arrives (no
    ``payload``); returning False, or an unreadable line, kills the run at once. An exception
    raised by ``on_line`` also kills the run, and is re-raised once the child is gone.
    """
    loop = asyncio.get_running_loop()
    mechanism = process_limit_mechanism()
    parent = pids_cgroup_parent() if mechanism == "cgroup-pids" else None
    cgroup = PidsCgroup.create(parent, limits.max_procs) if parent is not None else None
    nproc = _user_process_count() + limits.max_procs if mechanism == "rlimit-nproc" else None
    read_fd, write_fd = os.pipe()
    procs_fd = cgroup.open_procs_fd() if cgroup else None
    result = _ResultProtocol(on_line)
    result_transport: asyncio.BaseTransport | None = None
    start = time.monotonic()
    try:
        result_transport, _ = await loop.connect_read_pipe(
            lambda: result, os.fdopen(read_fd, "rb", buffering=0)
        )
        transport, child = await loop.subprocess_exec(
            lambda: _ChildProtocol(limits.output_bytes),
            *argv,
            cwd=str(workdir),
            env=_child_env(Path(workdir), env, write_fd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(write_fd,),
            start_new_session=True,
            preexec_fn=_make_preexec(_rlimits(limits, nproc), procs_fd),
        )
    except BaseException:
        if result_transport is not None:
            result_transport.close()
        else:
            os.close(read_fd)
        if cgroup is not None:
            await cgroup.destroy()
        raise
    finally:
        os.close(write_fd)
        if procs_fd is not None:
            os.close(procs_fd)

    pid = transport.get_pid()
    timed_out = killed = False
    try:
        done, _ = await asyncio.wait(
            {child.exited, result.stop}, timeout=limits.timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        seconds = time.monotonic() - start
        if child.exited not in done:  # timed out, or the line hook asked to stop
            timed_out, killed = not done, True
            _kill_group(pid, cgroup)
            await asyncio.wait({child.exited}, timeout=_READER_GRACE_S)
        _kill_group(pid, cgroup)  # stragglers the child left behind
        await asyncio.wait({child.closed, result.closed}, timeout=_READER_GRACE_S)
    finally:
        _kill_group(pid, cgroup)
        transport.close()
        result_transport.close()  # type: ignore[union-attr]
        if cgroup is not None:
            await asyncio.shield(asyncio.ensure_future(cgroup.destroy()))

    if result.hook_error is not None:
        raise result.hook_error
    code = transport.get_returncode()
    effective = "cgroup-pids" if cgroup else ("rlimit-nproc" if nproc is not None else "none")
    return SandboxResult(
        returncode=code,
        timed_out=timed_out,
        seconds=seconds,
        stdout_tail=child.tails[1].text(),
        stderr_tail=child.tails[2].text(),
        payload=result.payload(),
        signal_name=None if killed else _signal_name(code),
        limits=limits,
        process_limit=effective,
        stopped=result.stop.done(),
        stream_error=result.stream_error,
    )


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
