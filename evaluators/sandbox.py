"""Run an untrusted command in a resource-limited, environment-scrubbed, isolated subprocess.

The child gets a private working directory, a scrubbed environment (no API keys), rlimits on
memory, CPU time, file size and open files, and a process limit: a per-run ``pids`` cgroup when
running as root (root ignores RLIMIT_NPROC), else RLIMIT_NPROC. It is also isolated where the
host allows (isolation.py): as root, its own mount and network namespaces and a dedicated
unprivileged uid; as another user, its own user, mount, network and pid namespaces (userns.py).
Either way it can reach no network, write nowhere but its directory (a tmpfs of ``scratch_mb``),
see neither ``$HOME``, the temp folders nor the run's workspace (``hide``), and neither read nor
signal the run's processes.
Its result travels on a dedicated pipe whose descriptor number is in ``EVOFORGE_RESULT_FD``;
stdout and stderr are only kept as tails. The pipe is read either whole (one JSON object, the
default) or as JSON lines handed to an ``on_line`` hook as they arrive; the hook returning False
kills the run at once (``stopped=True``). A launcher (launch.py) starts the child: cold, fork
and exec; warm, forked by the task's fork server (warm.py). Either way this module owns the
cgroup, the uid and the kills. Example::

    result = await run_sandboxed([sys.executable, "-c", "print(1)"], workdir, SandboxLimits())
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evoforge.evaluators import isolation, userns
from evoforge.evaluators.cgroup_pids import PidsCgroup, pids_cgroup_parent, process_limit_mechanism
from evoforge.evaluators.eval_clock import current
from evoforge.evaluators.io_threads import off_loop
from evoforge.evaluators.launch import COLD, ChildSpec, Launcher, Running, child_env
from evoforge.evaluators.sandbox_io import ResultProtocol
from evoforge.evaluators.scratch import DEFAULT_SCRATCH_MB

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
    max_open_files: int = 512
    isolate: bool = True  # no network, read-only filesystem, no sight of the run, where available
    expose: tuple[str, ...] = ()  # isolated: more paths it may read behind closed folders
    hide: tuple[str, ...] = ()  # isolated: places it never sees (the run's workspace and run folder)
    scratch_mb: int = DEFAULT_SCRATCH_MB  # isolated: what it may write in its directory (a tmpfs)
    warm: bool = True  # harness runs: forked from a fork server with the imports loaded (warm.py)
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
    lost: str | None = None  # warm: the fork server died before it reported the child's exit
    retried: str | None = None  # warm: a first run was lost, and this is the second (why)
    finished_at: float | None = None  # monotonic time the result was in (before the copy's deletion)
    exited_at: float | None = None  # monotonic time the child's exit was known off the loop (warm)
    task_model: dict[str, float] | None = None  # the task-model calls it made (metrics), if linked

    def describe_failure(self, note: str = "", missing: str = "a result") -> str | None:
        """A one-paragraph reason (``note`` follows it), or None after an exit 0 with a payload."""
        if self.lost:
            return f"the warm sandbox lost the evaluation: {self.lost}{note}" + self._stderr_hint()
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


def _rlimits(limits: SandboxLimits, nproc: int | None) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) triples, clamped to the hard limits we already have."""
    cpu = limits.cpu_seconds()
    wanted = [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, limits.max_file_mb * 2**20, limits.max_file_mb * 2**20),
        (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
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


def _kill_group(pgid: int, cgroup: PidsCgroup | None, own_uid: int | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all()
    if own_uid is not None:  # the uid is this run's alone: whatever runs as it is a straggler
        isolation.kill_uid(own_uid)


async def scratch_dir(default: Path | None, limits: SandboxLimits) -> Path | None:
    """Where a child's private directory goes: under the sandbox root when children are isolated
    (a place the dedicated uid can enter), else ``default``."""
    if await _isolation(limits) != "none":
        return isolation.scratch_root()
    return default


async def _isolation(limits: SandboxLimits) -> str:
    """The kind of isolation this run's child gets: "root-uid", "userns" or "none" (the first
    call probes, off the event loop)."""
    if not limits.isolate:
        return "none"
    probed = isolation.availability.cache_info().currsize  # type: ignore[attr-defined]
    return (isolation.availability() if probed else await off_loop(isolation.availability)).kind


def describe_isolation(isolate: bool = True) -> dict[str, str]:
    """How children are isolated here (user, network, filesystem, process limit), in words."""
    avail = isolation.availability() if isolate else isolation.Availability(False, "sandbox.isolate: false")
    return {**avail.describe(), "process_limit": process_limit_mechanism()}


@dataclass
class _Confinement:
    """What confines one run beyond its rlimits: cgroup, RLIMIT_NPROC value, isolation, own uid."""

    limits: SandboxLimits
    cgroup: PidsCgroup | None
    nproc: int | None
    plan: isolation.Plan | None
    own_uid: int | None

    def kill(self, pgid: int) -> None:
        _kill_group(pgid, self.cgroup, self.own_uid)

    def mechanism(self) -> str:
        effective = "cgroup-pids" if self.cgroup else ("rlimit-nproc" if self.nproc is not None else "none")
        return effective + ({"root-uid": "+uid", "userns": "+userns"}[self.plan.kind] if self.plan else "")


async def run_sandboxed(
    argv: list[str],
    workdir: Path,
    limits: SandboxLimits,
    env: dict[str, str] | None = None,
    on_line: Callable[[dict], bool] | None = None,
    launcher: Launcher | None = None,
    task_model_fd: int | None = None,
) -> SandboxResult:
    """Run ``argv`` in ``workdir`` under ``limits`` and collect its result pipe and output tails.

    With ``on_line``, each JSON-object line of the result pipe is passed to it as it arrives (no
    ``payload``); returning False, or an unreadable line, kills the run at once. An exception
    raised by ``on_line`` also kills the run, and is re-raised once the child is gone.
    ``launcher`` starts the child (default: fork and exec it, ``COLD``; the warm sandbox's fork
    server takes harness arguments as ``argv``, evaluators/warm.py). ``task_model_fd`` is the
    child's end of its task-model link (task_model_link.py), inherited; the caller keeps and
    closes it.
    """
    launcher = launcher or COLD
    mechanism = process_limit_mechanism()
    kind = await _isolation(limits)
    uid, own = isolation.UIDS.take() if kind == "root-uid" else (None, False)
    plan: isolation.Plan | None = None
    if uid is not None:
        plan = await off_loop(_hand_over, Path(workdir), uid, limits)
    elif kind == "userns":
        plan = isolation.plan_for(Path(workdir), None, limits.expose, limits.hide, limits.scratch_mb)
    parent = pids_cgroup_parent() if mechanism == "cgroup-pids" and not launcher.makes_cgroup else None
    cgroup = PidsCgroup.create(parent, limits.max_procs) if parent is not None else None
    # the pids cgroup caps and finds every process of the run; without one, RLIMIT_NPROC caps it
    # and the dedicated uid finds them (RLIMIT_NPROC counts all of a uid's processes: those of a
    # killed evaluation still dying come first; each count and kill is a scan of /proc); in its
    # own user namespace only the namespace's processes count: its own and its middle process
    nproc = None
    cgrouped = cgroup is not None or launcher.makes_cgroup
    if not cgrouped and uid is not None:
        nproc = isolation.uid_processes(uid) + limits.max_procs
    elif not cgrouped and kind == "userns" and userns.NPROC_PER_NAMESPACE:
        nproc = limits.max_procs + 1
    elif not cgrouped and mechanism == "rlimit-nproc":
        nproc = isolation.uid_processes(os.getuid()) + limits.max_procs
    confinement = _Confinement(limits, cgroup, nproc, plan, uid if own and not cgrouped else None)
    try:
        return await _run(argv, Path(workdir), env, on_line, confinement, launcher, task_model_fd)
    finally:
        if own:
            isolation.UIDS.give_back(uid)  # type: ignore[arg-type]


def _hand_over(workdir: Path, uid: int, limits: SandboxLimits) -> isolation.Plan:
    isolation.hand_over(workdir, uid)
    return isolation.plan_for(workdir, uid, limits.expose, limits.hide, limits.scratch_mb)


async def _run(argv: list[str], workdir: Path, env: dict[str, str] | None,
               on_line: Callable[[dict], bool] | None, confined: _Confinement,
               launcher: Launcher, task_model_fd: int | None) -> SandboxResult:
    loop = asyncio.get_running_loop()
    limits, cgroup = confined.limits, confined.cgroup
    read_fd, write_fd = os.pipe()
    procs_fd = cgroup.open_procs_fd() if cgroup else None
    result = ResultProtocol(on_line)
    result_transport: asyncio.BaseTransport | None = None
    child: Running | None = None
    start = time.monotonic()
    try:
        spec = ChildSpec(argv, workdir, child_env(workdir, env), _rlimits(limits, confined.nproc),
                         procs_fd, confined.plan, write_fd, limits.output_bytes, limits.max_procs,
                         task_model_fd)
        child = await launcher.start(spec)
        clock = current()
        if clock is not None and clock.launched is None:  # cold: started by the loop
            clock.launched = time.monotonic()
        if child.cgroup is not None:
            confined.cgroup = cgroup = child.cgroup
        # the result pipe is read from here on: the kernel holds what the child writes meanwhile,
        # and the loop's turn this takes runs beside the child instead of before it
        result_transport, _ = await loop.connect_read_pipe(
            lambda: result, os.fdopen(read_fd, "rb", buffering=0)
        )
    except BaseException:
        if result_transport is not None:
            result_transport.close()
        else:
            os.close(read_fd)
        if child is not None:
            confined.kill(child.pid)
            child.close()
        if cgroup is not None:
            await cgroup.destroy()
        raise
    finally:
        os.close(write_fd)
        if procs_fd is not None:
            os.close(procs_fd)

    timed_out = killed = False
    try:
        done, _ = await asyncio.wait(
            {child.exited, result.stop}, timeout=limits.timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        seconds = time.monotonic() - start
        if child.exited not in done:  # timed out, or the line hook asked to stop
            timed_out, killed = not done, True
            confined.kill(child.pid)
            await asyncio.wait({child.exited}, timeout=_READER_GRACE_S)
        confined.kill(child.pid)  # stragglers the child left behind
        await asyncio.wait({child.closed, result.closed}, timeout=_READER_GRACE_S)
    finally:
        confined.kill(child.pid)
        child.close()
        result_transport.close()  # type: ignore[union-attr]
        if cgroup is not None:
            await asyncio.shield(asyncio.ensure_future(cgroup.destroy()))

    if result.hook_error is not None:
        raise result.hook_error
    code = child.returncode()
    stdout_tail, stderr_tail = child.tails()
    return SandboxResult(
        returncode=code,
        timed_out=timed_out,
        seconds=seconds,
        stdout_tail=stdout_tail,
        stderr_tail=stderr_tail,
        payload=result.payload(),
        signal_name=None if killed else _signal_name(code),
        limits=limits,
        process_limit=confined.mechanism(),
        stopped=result.stop.done(),
        stream_error=result.stream_error,
        lost=child.lost,
        exited_at=child.exited_at if child.exited.done() and not killed else None,
    )


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
