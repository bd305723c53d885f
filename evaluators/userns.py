"""Isolate a sandboxed child without root: its own user, mount, network, IPC and pid namespaces.

When evoforge does not run as root but the kernel lets an ordinary user create user namespaces,
each evaluation's child (cold: between fork and exec; warm: in the fork server's child) calls
``unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWPID)``, maps only its own
uid and gid, and forbids user namespaces below it. Then:

- **filesystem**: its private directory becomes a tmpfs of ``scratch_mb`` holding a copy of what
  was prepared there (scratch.py), every other mount is remounted read-only (their locked flags
  kept); ``/dev/shm`` is a fresh tmpfs; the user's own writable and private places (``/tmp``,
  ``/var/tmp``, ``$HOME``, ``/run/user/<uid>``), the run's workspace and the other evaluations'
  directories are covered by an empty tmpfs onto which only what Python and evoforge need is
  bound back (read-only: covers.py), and its own directory (writable);
- **network**: a fresh network namespace has only a downed loopback, and abstract unix sockets
  are per network namespace too;
- **processes**: the process forks once more, so the candidate is pid 1 of a new pid namespace
  with a fresh ``/proc``: it can neither see, signal nor read ``/proc/<pid>/environ`` of the
  run's processes, and when it exits every process it left behind dies with its namespace. The
  middle process waits for it and ends the same way (its exit code, or killed by its signal),
  so the sandbox's timeouts, exit codes and process-group kills work unchanged; either dying
  kills the other (parent-death signals). The candidate keeps no capability (``no_new_privs``).

RLIMIT_NPROC counts per user namespace (Linux 5.14+), so a limit of ``max_procs`` + 1 (the
middle process) caps this evaluation alone. Example::

    plan = plan_for(workdir, expose=())
    plan.apply_in_child(parent=os.getppid())   # in the child; True: now pid 1 of its namespace
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
import select
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NoReturn

from evoforge.evaluators.covers import child_covers
from evoforge.evaluators.mounts import (
    LIBC,
    MS,
    MS_PRIVATE,
    MS_REC,
    Cover,
    IsolationError,
    Mount,
    apply_cover,
    call,
    current_mounts,
    mount,
    remount_read_only,
)
from evoforge.evaluators.scratch import DEFAULT_SCRATCH_MB, limit_workdir

_CLONE_NEWNS, _CLONE_NEWNET, _CLONE_NEWPID = 0x00020000, 0x40000000, 0x20000000
_CLONE_NEWUSER, _CLONE_NEWIPC = 0x10000000, 0x08000000
_NAMESPACES = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_SIGCHLD = 17
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(os.uname().machine, -1)  # clone(2): fork with flags
_syscall = LIBC.syscall if LIBC is not None else None
if _syscall is not None:
    _syscall.restype = ctypes.c_long
_CAP_VERSION_3 = 0x20080522
_SHM_OPTIONS = b"mode=1777,size=64m"
_MIDDLE_FAILED = 125  # the middle process's exit when it cannot wait for the candidate
_UNREACHABLE = (errno.EACCES, errno.ENOENT, errno.ENOTDIR)  # a mount this uid cannot reach by path
# RLIMIT_NPROC counts the processes of one user namespace since Linux 5.14 (ucounts); before, all of
# the user's processes
NPROC_PER_NAMESPACE = tuple(int(n) for n in os.uname().release.split(".")[:2] if n.isdigit()) >= (5, 14)


@dataclass(frozen=True)
class UsernsPlan:
    """What a child does to isolate itself in its own user namespace (see the module doc)."""

    workdir: str
    uid: int
    gid: int
    mounts: tuple[Mount, ...]
    covers: tuple[Cover, ...]
    scratch_mb: int = DEFAULT_SCRATCH_MB
    kind: ClassVar[str] = "userns"

    def to_json(self) -> dict:
        """The plan as JSON-able data, for a fork server to apply in its children."""
        return {"kind": self.kind, "workdir": self.workdir, "uid": self.uid, "gid": self.gid,
                "mounts": [[m.path, m.flags] for m in self.mounts],
                "covers": [[c.directory, list(c.expose), list(c.writable)] for c in self.covers],
                "scratch_mb": self.scratch_mb}

    @classmethod
    def from_json(cls, data: dict) -> UsernsPlan:
        """The plan ``to_json`` wrote."""
        return cls(workdir=str(data["workdir"]), uid=int(data["uid"]), gid=int(data["gid"]),
                   mounts=tuple(Mount(str(p), int(f)) for p, f in data["mounts"]),
                   covers=tuple(Cover(str(d), tuple(map(str, e)), tuple(map(str, w)))
                                for d, e, w in data["covers"]),
                   scratch_mb=int(data["scratch_mb"]))

    def apply_in_child(self, parent: int, cloned: bool = False) -> bool:
        """Namespaces and mounts, then a fork: the calling process becomes the middle one (it
        never returns) and its child returns True, as pid 1 of its own pid namespace, tied to
        the middle one. ``parent``: the process whose death kills the middle one. ``cloned``:
        the caller was made in its namespaces already (``clone_into_namespaces``, a fork
        server's child): no unshare, no fork, it is pid 1 itself, tied to ``parent``."""
        if cloned:
            write_id_maps(self.uid, self.gid)
        else:
            enter_namespaces(self.uid, self.gid)
        _set_death_signal()
        gone = not os.path.exists(f"/proc/{parent}") if cloned else os.getppid() != parent
        if gone:  # the starter died before the line above (a cloned child's parent is out of its
            os._exit(1)  # pid namespace: the /proc of the host, still mounted, shows it)
        mount(b"none", b"/", None, MS_REC | MS_PRIVATE)
        limit_workdir(self.workdir, self.scratch_mb)
        for one in self.mounts:  # the workdir's own tmpfs is not in the list: it stays writable
            try:
                remount_read_only(one)
            except IsolationError as exc:
                if exc.errno not in _UNREACHABLE:  # unreachable: the candidate cannot reach it either
                    raise
        mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS["nosuid"] | MS["nodev"], _SHM_OPTIONS)
        for cover in self.covers:  # exposed paths: binds of mounts made read-only above (a bind
            apply_cover(cover, read_only_binds=False)  # keeps them; re-setting flags may be refused)
        if not cloned:
            _fork_candidate()
        mount(b"proc", b"/proc", b"proc", MS["nosuid"] | MS["nodev"] | MS["noexec"])
        os.chdir(self.workdir)
        drop_capabilities()
        return True


def enter_namespaces(uid: int, gid: int) -> None:
    """unshare the namespaces, map ``uid``/``gid`` to themselves, forbid user namespaces below."""
    call("unshare", LIBC.unshare(_NAMESPACES))
    write_id_maps(uid, gid)


def clone_into_namespaces() -> int:
    """fork(2) straight into new namespaces (a raw clone: no second fork makes the child pid 1);
    the child's pid here, 0 in the child. Only for a single-threaded caller (a fork server):
    Python's own fork handlers do not run."""
    pid = _syscall(_SYS_CLONE, ctypes.c_ulong(_NAMESPACES | _SIGCHLD), None, None, None, None)
    if pid < 0:
        code = ctypes.get_errno()
        raise IsolationError(code, f"clone: {os.strerror(code)}")
    return pid


def _fork_candidate() -> None:
    """Fork: the middle process mirrors the candidate's end and never returns; the candidate
    (pid 1 of the new pid namespace) returns, tied to the middle one."""
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid != 0:
        _mirror(pid, alive_w)  # never returns
    os.close(alive_w)
    _set_death_signal()
    if select.select([alive_r], [], [], 0)[0]:  # EOF: the middle process died already
        os._exit(1)
    os.close(alive_r)


def write_id_maps(uid: int, gid: int) -> None:
    """Map ``uid``/``gid`` to themselves in the new user namespace; forbid user namespaces below."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _write("/proc/sys/user/max_user_namespaces", "0")  # no nested namespace unlocks a mount


def drop_capabilities() -> None:
    """Keep no capability (a forked child holds them all in its user namespace) and gain none."""
    call("prctl(PR_SET_NO_NEW_PRIVS)", LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (x2): all empty
    call("capset", LIBC.capset(header, data))


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        raise IsolationError(exc.errno, f"write {path}: {exc.strerror}") from exc


def _set_death_signal() -> None:
    call("prctl(PR_SET_PDEATHSIG)", LIBC.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0))


def _mirror(child: int, alive_w: int) -> NoReturn:
    """In the middle process: wait for the candidate, then end as it ended."""
    try:
        os.closerange(0, alive_w)  # nothing of the sandbox's pipes stays open here
        os.closerange(alive_w + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        _, status = os.waitpid(child, 0)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            LIBC.signal(sig, 0)  # SIG_DFL (this may not be Python's main thread)
            LIBC.sigprocmask(1, ctypes.byref(ctypes.c_uint64(1 << (sig - 1))), None)  # SIG_UNBLOCK
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)  # a signal whose default is to be ignored
        os._exit(os.waitstatus_to_exitcode(status))
    finally:
        os._exit(_MIDDLE_FAILED)


def plan_for(workdir: Path, expose: tuple[str, ...] = (), hide: tuple[str, ...] = (),
             scratch_mb: int = DEFAULT_SCRATCH_MB) -> UsernsPlan:
    """The isolation of one child in ``workdir``; ``expose``: more paths it may read that would
    be covered (e.g. a toolchain under ``$HOME``); ``hide``: places it must never see (the run's
    workspace); ``scratch_mb``: what it may write in its directory."""
    workdir = workdir.resolve()
    return UsernsPlan(workdir=str(workdir), uid=os.getuid(), gid=os.getgid(), mounts=current_mounts(),
                      covers=child_covers(workdir, expose, hide), scratch_mb=scratch_mb)


def unshare_refusal() -> str | None:
    """Why the kernel refuses this user new user namespaces (its settings), or None."""
    settings = {
        "/proc/sys/kernel/unprivileged_userns_clone": ("0", "sysctl -w kernel.unprivileged_userns_clone=1"),
        "/proc/sys/user/max_user_namespaces": ("0", "sysctl -w user.max_user_namespaces=15000"),
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns":
            ("1", "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
    }
    for path, (refusing, fix) in settings.items():
        with contextlib.suppress(OSError):  # a setting this kernel does not have
            if Path(path).read_text().strip() == refusing:
                name = path.removeprefix("/proc/sys/").replace("/", ".")
                return (f"unprivileged user namespaces are disabled "
                        f"({name} = {refusing}: {fix}, or run as root)")
    return None
