"""How a sandboxed child is started: what it is given (``ChildSpec``) and who starts it.

A *launcher* turns a spec into a running child. ``COLD`` forks and execs ``spec.argv``, the
confinement applied between fork and exec by ``preexec_fn`` (the cgroup, isolation, rlimits,
death with the starting thread; a child in its own user namespace is isolated by a fresh Python
instead, userns_exec.py, since this process's fork may have threads); the warm sandbox's fork
server (fork_client.py) starts a child forked from a Python with the task's imports loaded,
confined the same way in the child.
The sandbox (sandbox.py) owns what surrounds it: the uid, the cgroup, the kills, the result.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from evoforge.evaluators import isolation
from evoforge.evaluators.cgroup_pids import PidsCgroup
from evoforge.evaluators.sandbox_io import ChildProtocol
from evoforge.evaluators.userns import UsernsPlan
from evoforge.evaluators.userns_exec import command

# LanceDB (the cognition base) warns at every fork; a sandbox child execs a fresh Python at once
# and never touches LanceDB's runtime, so the warning says nothing about it
warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)

_PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
TASK_MODEL_FD_ENV = "EVOFORGE_TASK_MODEL_FD"  # the task-model link's descriptor (compat/evoforge_channel.py)


def child_env(workdir: Path, extra: dict[str, str] | None) -> dict[str, str]:
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
    return env


@dataclass(frozen=True)
class ChildSpec:
    """What a launcher starts: ``argv`` in ``workdir`` with ``env``, under ``rlimits``, in the
    cgroup whose ``cgroup.procs`` is open as ``procs_fd``, isolated by ``plan``; the result pipe's
    write end is ``result_fd`` (the launcher names it in the child's ``EVOFORGE_RESULT_FD``), and
    ``task_model_fd``, when given, the child's end of its task-model link (task_model_link.py,
    named in ``EVOFORGE_TASK_MODEL_FD``)."""

    argv: list[str]
    workdir: Path
    env: dict[str, str]
    rlimits: list[tuple[int, int, int]]
    procs_fd: int | None
    plan: isolation.Plan | None
    result_fd: int
    output_bytes: int
    max_procs: int = 64  # for a launcher that makes the child's pids cgroup itself
    task_model_fd: int | None = None


class Running(Protocol):
    """A started child, as the sandbox watches it (``exited``/``closed`` resolve on its loop)."""

    pid: int
    exited: asyncio.Future[None]
    closed: asyncio.Future[None]  # its stdout and stderr are closed
    lost: str | None  # why its launcher could not report its exit (a fork server that died)
    cgroup: PidsCgroup | None  # the pids cgroup its launcher put it in (None: the spec's, if any)
    exited_at: float | None  # monotonic time its exit was known off the event loop (None: unknown)

    def returncode(self) -> int | None: ...

    def tails(self) -> tuple[str, str]: ...

    def close(self) -> None: ...


class Launcher(Protocol):
    """Starts a child for a spec; ``makes_cgroup``: it puts the child in a pids cgroup of its own
    (``Running.cgroup``), so the sandbox makes none."""

    makes_cgroup: bool

    def start(self, spec: ChildSpec) -> Awaitable[Running]: ...


def _make_preexec(rlimits: list[tuple[int, int, int]], procs_fd: int | None,
                  plan: isolation.Plan | None) -> Callable[[], None]:
    """The child-side hook run between fork and exec: join the cgroup, then be confined
    (isolation.confine: namespaces and the dedicated uid, or the child's own user and pid
    namespaces, where it forks once more and only the candidate returns; rlimits; death with
    the parent)."""
    parent = os.getpid()

    def preexec() -> None:
        if procs_fd is not None:
            os.write(procs_fd, str(os.getpid()).encode())
        isolation.confine(plan, rlimits, parent)

    return preexec


class _ColdChild:
    """A child forked and exec'd by the event loop (``COLD``)."""

    lost: str | None = None
    cgroup: PidsCgroup | None = None
    exited_at: float | None = None  # the loop's child watcher sees the exit: no earlier stamp

    def __init__(self, transport: asyncio.SubprocessTransport, protocol: ChildProtocol) -> None:
        self.transport, self.protocol = transport, protocol
        self.pid = transport.get_pid()
        self.exited, self.closed = protocol.exited, protocol.closed

    def returncode(self) -> int | None:
        return self.transport.get_returncode()

    def tails(self) -> tuple[str, str]:
        return self.protocol.tails[1].text(), self.protocol.tails[2].text()

    def close(self) -> None:
        self.transport.close()


class _Cold:
    """Forks and execs ``spec.argv``, confined between fork and exec by ``preexec_fn``."""

    makes_cgroup = False

    async def start(self, spec: ChildSpec) -> Running:
        loop = asyncio.get_running_loop()
        env, fds = {**spec.env, "EVOFORGE_RESULT_FD": str(spec.result_fd)}, [spec.result_fd]
        if spec.task_model_fd is not None:
            env[TASK_MODEL_FD_ENV] = str(spec.task_model_fd)
            fds.append(spec.task_model_fd)
        argv, rlimits, plan = spec.argv, spec.rlimits, spec.plan
        if isinstance(plan, UsernsPlan):  # isolated by a fresh Python: this fork may have threads
            argv, rlimits, plan = command(plan, rlimits, os.getpid(), argv), [], None
        transport, protocol = await loop.subprocess_exec(
            lambda: ChildProtocol(spec.output_bytes),
            *argv,
            cwd=str(spec.workdir),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=tuple(fds),
            start_new_session=True,
            preexec_fn=_make_preexec(rlimits, spec.procs_fd, plan),
        )
        return _ColdChild(transport, protocol)


COLD = _Cold()
