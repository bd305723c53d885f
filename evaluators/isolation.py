"""Isolate a sandboxed child from the host: as root, a dedicated uid; otherwise, namespaces.

``availability()`` probes once per process which *kind* of isolation this host gives, and the
sandbox uses the strongest: ``root-uid`` > ``userns`` > ``none``.

When evoforge runs as root on Linux (``root-uid``), every evaluation's child is started in its
own mount and network namespaces and then drops to a dedicated unprivileged uid (one per
concurrent evaluation, from ``uid_base``) before it execs:

- **network**: a fresh network namespace has only a downed loopback, so ``connect`` to any
  address, the host's LLM server included, fails with "Network is unreachable";
- **filesystem**: every mount is remounted read-only in the child's namespace except its private
  directory (a tmpfs of ``scratch_mb`` holding a copy of what was prepared there: scratch.py)
  and a private ``/dev/shm``; ``$HOME``, ``/tmp``, ``/var/tmp``, ``/run/user/<uid>``, the run's
  workspace and the directories the uid may not enter on the way to what Python needs (e.g.
  ``/root``, mode 0700, where pyenv puts the interpreter) are covered with an empty tmpfs that
  exposes only the paths Python needs (covers.py), so nothing else of them is visible;
- **processes**: as that uid the child can neither read other processes' ``/proc/*/environ``
  nor signal them (the orchestrator included), and RLIMIT_NPROC counts only its own processes.

As an ordinary user (``userns``, userns.py) the child makes its own user, mount, network, IPC
and pid namespaces instead: the same read-only filesystem and covers, no network, and the
candidate pid 1 of a pid namespace with its own ``/proc``. Where neither
works (``none``: the kernel forbids user namespaces, not Linux, ...) the sandbox falls back to
rlimits, a scrubbed environment and its own process group, ``Availability.missing`` says what is
missing and how to get it, and the run says so in one line at start (isolation_notice.py).
Example::

    if availability().kind == "root-uid":  # probed once per process
        uid, owned = UIDS.take()
        hand_over(workdir, uid)
        plan = plan_for(workdir, uid)     # then confine(plan, rlimits, parent) between fork and exec
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from evoforge.evaluators import userns, userns_exec
from evoforge.evaluators.covers import child_covers, closed_folder_covers
from evoforge.evaluators.mounts import (
    LIBC,
    MS,
    MS_BIND,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    Cover,
    IsolationError,
    Mount,
    apply_cover,
    call,
    current_mounts,
    mount,
)
from evoforge.evaluators.scratch import DEFAULT_SCRATCH_MB, ScratchError, limit_workdir, scratch_root
from evoforge.evaluators.userns import UsernsPlan

__all__ = ["UID_BASE", "UID_COUNT", "UIDS", "Availability", "IsolationError", "IsolationPlan", "Plan",
           "ScratchError", "UsernsPlan", "availability", "closed_folder_covers", "confine", "hand_over",
           "kill_uid", "plan_for", "plan_from_json", "scratch_root", "uid_processes"]

log = logging.getLogger(__name__)

UID_BASE = 57000  # a dedicated range: uid/gid UID_BASE .. UID_BASE + UID_COUNT - 1
UID_COUNT = 128
_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_SHM_OPTIONS = b"mode=1777,size=64m"
_PR_SET_PDEATHSIG = 1
_FILESYSTEM = ("read-only except its private directory (a tmpfs of sandbox.scratch_mb); $HOME, /tmp, "
               "/var/tmp, /run/user and the workspace hidden (own mount namespace)")
_SETUP_FAILED = 126  # the probe's child could not isolate itself (why: its stderr)
_NO_USERNS = "unprivileged user namespaces are disabled"
_NO_USERNS_FIX = ("sysctl -w kernel.unprivileged_userns_clone=1, "
                  "kernel.apparmor_restrict_unprivileged_userns=0 or user.max_user_namespaces=15000, "
                  "or run as root")


@dataclass(frozen=True)
class IsolationPlan:
    """What a child isolated as root does between fork and exec (see the module doc)."""

    uid: int
    workdir: str
    mounts: tuple[Mount, ...]
    covers: tuple[Cover, ...]
    scratch_mb: int = DEFAULT_SCRATCH_MB
    kind = "root-uid"

    def to_json(self) -> dict:
        """The plan as JSON-able data, for a fork server to apply in its children."""
        return {"kind": self.kind, "uid": self.uid, "workdir": self.workdir,
                "mounts": [[m.path, m.flags] for m in self.mounts],
                "covers": [[c.directory, list(c.expose), list(c.writable)] for c in self.covers],
                "scratch_mb": self.scratch_mb}

    @classmethod
    def from_json(cls, data: dict) -> IsolationPlan:
        """The plan ``to_json`` wrote."""
        return cls(uid=int(data["uid"]), workdir=str(data["workdir"]),
                   mounts=tuple(Mount(str(p), int(f)) for p, f in data["mounts"]),
                   covers=tuple(Cover(str(d), tuple(map(str, e)), tuple(map(str, w)))
                                for d, e, w in data["covers"]),
                   scratch_mb=int(data["scratch_mb"]))

    def apply_in_child(self, parent: int, cloned: bool = False) -> bool:
        """Namespaces, read-only mounts, then the dedicated uid; raises IsolationError. False:
        the process stays its starter's child (``parent`` is for the caller to watch; never
        ``cloned``: a root child is forked plainly)."""
        call("unshare", LIBC.unshare(_CLONE_NEWNS | _CLONE_NEWNET))
        mount(b"none", b"/", None, MS_REC | MS_PRIVATE)
        limit_workdir(self.workdir, self.scratch_mb, owner=self.uid)
        for one in self.mounts:  # the workdir's own tmpfs is not in the list: it stays writable
            mount(None, one.path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | one.flags)
        mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS["nosuid"] | MS["nodev"], _SHM_OPTIONS)
        for cover in self.covers:
            apply_cover(cover)
        os.chdir(self.workdir)  # the cwd set before this hook points at the read-only mount
        os.setgroups([])
        os.setgid(self.uid)
        os.setuid(self.uid)
        return False


Plan = IsolationPlan | UsernsPlan


def plan_from_json(data: dict) -> Plan:
    """A plan of either kind from its ``to_json``."""
    if data.get("kind") == UsernsPlan.kind:
        return UsernsPlan.from_json(data)
    return IsolationPlan.from_json(data)


def confine(plan: Plan | None, rlimits: list[tuple[int, int, int]], parent: int,
            cloned: bool = False) -> None:
    """In a sandbox child that has joined its pids cgroup (cold: between fork and exec; warm: in
    the fork server's child): isolate it (root: namespaces, then the dedicated uid; userns: its
    namespaces, the candidate then pid 1 of its own), set its rlimits, then make it die with
    ``parent`` (set last: a uid change clears it), dying now if ``parent`` is gone already: a
    child whose starter died (e.g. a Dask worker killed mid-evaluation) does not live on as an
    orphan that nobody times out. (A userns candidate is tied to its middle process already, or,
    ``cloned`` into its namespaces by a fork server, to the server.)"""
    tied = plan.apply_in_child(parent, cloned) if plan is not None else False
    for res, soft, hard in rlimits:
        resource.setrlimit(res, (soft, hard))
    if LIBC is not None and not tied:
        LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)


class _UidPool:
    """Hands out the dedicated uids, one per evaluation running at once on this machine.

    A uid is held by an exclusive ``flock`` on its lock file, so two evoforge processes never
    hold one uid at once (each kills whatever runs as its uid) and a dead process's uids free
    themselves. Past the pool, uids are shared, and not owned (nothing is killed by uid).
    """

    def __init__(self, base: int, count: int) -> None:
        self.base, self.count = base, count
        self._held: dict[int, int] = {}  # uid -> the lock file's descriptor
        self._next_shared = 0
        self._last = count - 1
        self._lock = threading.Lock()

    def take(self) -> tuple[int, bool]:
        """A uid, and whether it is this caller's alone (False: more evaluations than uids)."""
        locks = scratch_root() / "uids"
        locks.mkdir(mode=0o700, exist_ok=True)
        with self._lock:
            for step in range(1, self.count + 1):  # round robin: a uid just killed rests longest
                uid = self.base + (self._last + step) % self.count
                if uid in self._held:
                    continue
                fd = os.open(locks / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self._held[uid] = fd
                self._last = uid - self.base
                return uid, True
            self._next_shared = (self._next_shared + 1) % self.count
            return self.base + self._next_shared, False

    def give_back(self, uid: int) -> None:
        with self._lock:
            fd = self._held.pop(uid, None)
        if fd is not None:
            os.close(fd)  # releases the flock


UIDS = _UidPool(UID_BASE, UID_COUNT)


@dataclass(frozen=True)
class Availability:
    """What this process can isolate, found once by a probe: its ``kind`` ("root-uid", "userns",
    "none"), ``reason`` when it cannot, and ``missing``: one line per protection it lacks, each
    saying how to get it (``evoforge doctor`` and the run's start show them)."""

    isolated: bool
    reason: str = ""
    kind: str = "none"
    missing: tuple[str, ...] = ()

    def describe(self) -> dict[str, str]:
        """The isolation in words, as ``evoforge status`` shows it."""
        if self.kind == "root-uid":
            return {"isolation": self.kind,
                    "user": f"dedicated uid {UID_BASE}-{UID_BASE + UID_COUNT - 1}, one per evaluation",
                    "network": "denied (own network namespace)",
                    "filesystem": _FILESYSTEM,
                    "processes": "out of reach (another uid)"}
        if self.kind == "userns":
            return {"isolation": self.kind,
                    "user": "evoforge's own uid in its own user namespace, without capabilities",
                    "network": "denied (own network namespace)",
                    "filesystem": _FILESYSTEM,
                    "processes": "out of sight (own pid namespace, its own /proc)"}
        return {"isolation": "none", "user": f"same as evoforge ({self.reason})", "network": "allowed",
                "filesystem": "writable where evoforge's user may write",
                "processes": "visible and signalable (same uid)"}


def plan_for(workdir: Path, uid: int | None, expose: tuple[str, ...] = (), hide: tuple[str, ...] = (),
             scratch_mb: int = DEFAULT_SCRATCH_MB) -> Plan:
    """The isolation of one child in ``workdir``: as the dedicated ``uid`` (root), or in its own
    user namespace (``uid`` None); ``expose``: more paths it may read where it could not enter
    (e.g. a toolchain under ``/root`` or ``$HOME``); ``hide``: places it must never see (the run's
    workspace and run folder); ``scratch_mb``: what it may write in its directory (covers.py,
    scratch.py)."""
    if uid is None:
        return userns.plan_for(workdir, expose, hide, scratch_mb)
    workdir = workdir.resolve()
    return IsolationPlan(uid=uid, workdir=str(workdir), mounts=current_mounts(),
                         covers=child_covers(workdir, expose, hide, closed=True), scratch_mb=scratch_mb)


def hand_over(workdir: Path, uid: int) -> None:
    """Give ``workdir`` and everything in it to ``uid``: its only writable place."""
    os.chown(workdir, uid, uid)
    for base, dirs, files in os.walk(workdir):
        for name in dirs + files:
            os.chown(os.path.join(base, name), uid, uid, follow_symlinks=False)


def _pids_of(uid: int) -> Iterator[int]:
    """The processes running as ``uid``, from one scan of /proc."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    yield int(entry.name)


def uid_processes(uid: int) -> int:
    """How many processes run as ``uid`` (those of a killed evaluation may take a moment to go)."""
    return sum(1 for _ in _pids_of(uid))


def kill_uid(uid: int) -> int:
    """SIGKILL every process of the dedicated ``uid`` (stragglers that left their group)."""
    killed = 0
    for pid in _pids_of(uid):
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
            killed += 1
    return killed


@cache
def availability() -> Availability:
    """Probe once which isolation a child gets here: root-uid, userns, or none (and why)."""
    if LIBC is None:
        return _unavailable("not Linux", "no network/filesystem/process isolation: not Linux")
    if os.geteuid() != 0:
        return _userns_availability()
    taken = _users_in_range()
    if taken:
        return _unavailable(f"uids {UID_BASE}-{UID_BASE + UID_COUNT - 1} are not free: "
                            f"{', '.join(taken[:3])} in the user database")
    uid, own = UIDS.take()
    try:
        why = _probe(uid)
    finally:
        if own:
            kill_uid(uid)
            UIDS.give_back(uid)
    return Availability(True, kind="root-uid") if why is None else _unavailable(why)


def _userns_availability() -> Availability:
    refusal = userns.unshare_refusal()
    if refusal is not None:
        return _unavailable(refusal, f"no network/filesystem/process isolation: {refusal}")
    why = _probe(None)
    if why is None:
        return Availability(True, kind="userns")
    if why.startswith("unshare:"):
        why = f"{_NO_USERNS} ({why}: {_NO_USERNS_FIX})"
    return _unavailable(why, f"no network/filesystem/process isolation: {why}")


def _probe(uid: int | None) -> str | None:
    """Run a Python isolated as a candidate would be; None when it ran so, else why not."""
    workdir = Path(tempfile.mkdtemp(prefix="probe-", dir=scratch_root()))
    parent = os.getpid()
    expected = str(uid) if uid is not None else f"1 {os.getuid()}"  # userns: pid 1, same uid

    def isolate() -> None:
        try:
            confine(plan, [], parent)
        except OSError as exc:  # said on its stderr: a preexec_fn's exception would lose it
            os.write(2, f"{exc.strerror or exc}\n".encode())
            os._exit(_SETUP_FAILED)

    try:
        if uid is not None:
            hand_over(workdir, uid)
        plan = plan_for(workdir, uid)
        probe = ("import os; open('probe', 'w').write('ok'); "
                 + ("print(os.getuid())" if uid is not None else "print(os.getpid(), os.getuid())"))
        argv = [sys.executable, "-c", probe]
        if isinstance(plan, UsernsPlan):  # as the cold sandbox starts it (launch.py)
            argv = userns_exec.command(plan, [], parent, argv)
        done = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=60,
                              preexec_fn=None if isinstance(plan, UsernsPlan) else isolate,
                              env={"PATH": os.environ.get("PATH", os.defpath)})
        if done.returncode == _SETUP_FAILED:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return last.removeprefix(userns_exec.SETUP_FAILED_PREFIX)[:300]
        if done.returncode != 0 or done.stdout.strip() != expected:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return f"an isolated Python did not run: {last[:200]}"
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _users_in_range() -> list[str]:
    return [f"{user.pw_name} ({user.pw_uid})" for user in pwd.getpwall()
            if UID_BASE <= user.pw_uid < UID_BASE + UID_COUNT]


def _unavailable(reason: str, missing: str = "") -> Availability:
    # said at each run's start, on stderr and in run.log (isolation_notice.py), and by doctor/status
    log.info("sandbox: candidates run without network/filesystem/process isolation: %s", reason,
             exc_info=sys.exc_info()[0] is not None)
    return Availability(False, reason, "none", (missing or f"no uid/network/filesystem isolation: {reason}",))
