"""Isolate a sandboxed child from the host: a dedicated uid, no network, a read-only filesystem.

When evoforge runs as root on Linux, every evaluation's child is started in its own mount and
network namespaces and then drops to a dedicated unprivileged uid (one per concurrent
evaluation, from ``uid_base``) before it execs:

- **network**: a fresh network namespace has only a downed loopback, so ``connect`` to any
  address, the host's LLM server included, fails with "Network is unreachable";
- **filesystem**: every mount is remounted read-only in the child's namespace except its private
  directory (bind-mounted onto itself) and a private ``/dev/shm``; directories the uid may not
  enter (e.g. ``/root``, mode 0700, where pyenv puts the interpreter) are covered with an empty
  tmpfs that exposes only the paths Python needs, so nothing else of them is visible;
- **processes**: as that uid the child can neither read other processes' ``/proc/*/environ``
  nor signal them (the orchestrator included), and RLIMIT_NPROC counts only its own processes.

Where any of this is unavailable (not root, no CAP_SYS_ADMIN, an interpreter the uid cannot
run) a probe finds out once per process, the sandbox falls back to what it had before (rlimits,
scrubbed environment, own process group) and ``describe()`` says so, for ``evoforge status``.
Example::

    if availability().isolated:           # probed once per process
        uid, owned = UIDS.take()
        hand_over(workdir, uid)
        plan = plan_for(workdir, uid)     # then plan.apply_in_child() between fork and exec
"""

from __future__ import annotations

import contextlib
import ctypes
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

log = logging.getLogger(__name__)

UID_BASE = 57000  # a dedicated range: uid/gid UID_BASE .. UID_BASE + UID_COUNT - 1
UID_COUNT = 128
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]
_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_MS = {"ro": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048,
       "relatime": 1 << 21, "strictatime": 1 << 24}
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_SHM_OPTIONS = b"mode=1777,size=64m"
_SCRATCH_TMPFS = b"mode=0711,size=25%"  # the private directories' tmpfs (a quarter of the RAM at most)
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1


class IsolationError(OSError):
    """A namespace or mount call failed in the child (raised before exec)."""


@dataclass(frozen=True)
class _Mount:
    path: str
    flags: int  # the mount's own flags (nosuid, nodev, ...), kept when it is made read-only


@dataclass(frozen=True)
class _Cover:
    """A directory the uid may not enter, covered by a tmpfs that exposes only ``expose``."""

    directory: str
    expose: tuple[str, ...]


@dataclass(frozen=True)
class IsolationPlan:
    """What the child does between fork and exec to isolate itself (see the module doc)."""

    uid: int
    workdir: str
    mounts: tuple[_Mount, ...]
    covers: tuple[_Cover, ...]

    def to_json(self) -> dict:
        """The plan as JSON-able data, for a fork server to apply in its children."""
        return {"uid": self.uid, "workdir": self.workdir,
                "mounts": [[m.path, m.flags] for m in self.mounts],
                "covers": [[c.directory, list(c.expose)] for c in self.covers]}

    @classmethod
    def from_json(cls, data: dict) -> IsolationPlan:
        """The plan ``to_json`` wrote."""
        return cls(uid=int(data["uid"]), workdir=str(data["workdir"]),
                   mounts=tuple(_Mount(str(p), int(f)) for p, f in data["mounts"]),
                   covers=tuple(_Cover(str(d), tuple(map(str, e))) for d, e in data["covers"]))

    def apply_in_child(self) -> None:
        """Namespaces, read-only mounts, then the dedicated uid; raises IsolationError."""
        _call("unshare", _LIBC.unshare(_CLONE_NEWNS | _CLONE_NEWNET))
        _mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE)
        _mount(self.workdir.encode(), self.workdir.encode(), None, _MS_BIND | _MS_REC)
        for mount in self.mounts:  # the workdir's own bind is not in the list: it stays writable
            _mount(None, mount.path.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | mount.flags)
        _mount(b"tmpfs", b"/dev/shm", b"tmpfs", _MS["nosuid"] | _MS["nodev"], _SHM_OPTIONS)
        for cover in self.covers:
            _apply_cover(cover)
        os.chdir(self.workdir)  # the cwd set before this hook points at the read-only mount
        os.setgroups([])
        os.setgid(self.uid)
        os.setuid(self.uid)



def confine(plan: IsolationPlan | None, rlimits: list[tuple[int, int, int]], parent: int) -> None:
    """In a sandbox child that has joined its pids cgroup (cold: between fork and exec; warm: in
    the fork server's child): isolate it (namespaces, then the dedicated uid), set its rlimits,
    then make it die with ``parent`` (set last: a uid change clears it), dying now if ``parent``
    is gone already: a child whose starter died (e.g. a Dask worker killed mid-evaluation) does
    not live on as an orphan that nobody times out."""
    if plan is not None:
        plan.apply_in_child()
    for res, soft, hard in rlimits:
        resource.setrlimit(res, (soft, hard))
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)

def _call(what: str, rc: int) -> None:
    if rc != 0:
        errno = ctypes.get_errno()
        raise IsolationError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int,
           data: bytes | None = None) -> None:
    _call(f"mount {target.decode(errors='replace')}", _LIBC.mount(source, target, fstype, flags, data))


def _apply_cover(cover: _Cover) -> None:
    """Cover ``cover.directory`` with a tmpfs and bind its exposed paths back, read-only."""
    fds = [os.open(path, os.O_PATH | os.O_CLOEXEC) for path in cover.expose]
    try:
        _mount(b"tmpfs", cover.directory.encode(), b"tmpfs", _MS["nosuid"] | _MS["nodev"],
               b"mode=0755,size=1m")
        for path, fd in zip(cover.expose, fds, strict=True):
            target = Path(path)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            _mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, _MS_BIND | _MS_REC)
            _mount(None, path.encode(), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)
        _mount(None, cover.directory.encode(), None, _MS_REMOUNT | _MS_RDONLY | _MS["nosuid"] | _MS["nodev"])
    finally:
        for fd in fds:
            os.close(fd)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def _mounts() -> tuple[_Mount, ...]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        flags = 0
        for option in fields[5].split(","):
            flags |= _MS.get(option, 0) & ~_MS_RDONLY
        mounts.append(_Mount(_unescape(fields[4]), flags))
    return tuple(mounts)


def _enterable(directory: Path) -> bool:
    """Whether a uid that is neither owner nor in the group may pass through ``directory``."""
    try:
        return bool(directory.stat().st_mode & 0o001)
    except OSError:
        return False


def _needed_paths() -> list[Path]:
    """What the child's Python needs to read: its prefixes, its import path, evoforge itself."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
             Path(os.path.realpath(sys.executable)).parent, _PACKAGE_ROOT}
    paths.update(Path(p) for p in sys.path if p and os.path.isabs(p))
    return sorted(p.resolve() for p in paths if p.exists())


def _covers(paths: list[Path]) -> tuple[_Cover, ...]:
    """Group the paths behind an unenterable directory by that directory (the topmost one)."""
    by_dir: dict[Path, list[Path]] = {}
    for path in paths:
        blocked = next((a for a in reversed(path.parents) if a != Path("/") and not _enterable(a)), None)
        if blocked is not None:
            by_dir.setdefault(blocked, []).append(path)
    covers = []
    for directory, exposed in sorted(by_dir.items()):
        kept = [p for p in exposed if not any(q != p and q in p.parents for q in exposed)]
        covers.append(_Cover(str(directory), tuple(str(p) for p in kept)))
    return tuple(covers)


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
    """What this process can isolate, found once by a probe; ``reason`` when it cannot."""

    isolated: bool
    reason: str = ""

    def describe(self) -> dict[str, str]:
        """The isolation in words, as ``evoforge status`` shows it."""
        if not self.isolated:
            return {"user": f"same as evoforge ({self.reason})", "network": "allowed",
                    "filesystem": "writable where evoforge's user may write"}
        return {"user": f"dedicated uid {UID_BASE}-{UID_BASE + UID_COUNT - 1}, one per evaluation",
                "network": "denied (own network namespace)",
                "filesystem": "read-only except its private directory (own mount namespace)"}


def scratch_root() -> Path:
    """Where isolated children's private directories live: a root-owned, enterable directory,
    on a tmpfs as root (a disk's journal makes creating and deleting them cost milliseconds)."""
    return _scratch_at(Path(tempfile.gettempdir()) / "evoforge-sandbox")


@cache
def _scratch_at(root: Path) -> Path:
    root.mkdir(mode=0o711, exist_ok=True)
    if _LIBC is not None and os.geteuid() == 0:
        with open(root.parent / ".evoforge-sandbox.lock", "a") as lock:  # one mount, whoever comes first
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.ismount(root):
                try:
                    _mount(b"tmpfs", str(root).encode(), b"tmpfs", _MS["nosuid"] | _MS["nodev"],
                           _SCRATCH_TMPFS)
                except IsolationError as exc:
                    log.info("sandbox: private directories stay on %s's filesystem: %s", root, exc)
    return root


def plan_for(workdir: Path, uid: int, expose: tuple[str, ...] = ()) -> IsolationPlan:
    """The isolation of one child in ``workdir`` running as ``uid``; ``expose``: more paths it
    may read where it could not enter (e.g. a toolchain under ``/root``)."""
    return IsolationPlan(uid=uid, workdir=str(workdir), mounts=_mounts(), covers=_covers_for(expose))


@cache
def _covers_for(expose: tuple[str, ...]) -> tuple[_Cover, ...]:
    """The covers of a child that may read ``expose`` too (found once per process: a hot path)."""
    extra = [Path(p).expanduser().resolve() for p in expose if Path(p).expanduser().exists()]
    return _covers(sorted(set(_needed_paths() + extra)))


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
    """Probe once whether a child can be isolated here (root, namespaces, a reachable Python)."""
    if _LIBC is None:
        return Availability(False, "not Linux")
    if os.geteuid() != 0:
        return Availability(False, "not root: cannot switch to a dedicated uid")
    taken = _users_in_range()
    if taken:
        return _unavailable(f"uids {UID_BASE}-{UID_BASE + UID_COUNT - 1} are not free: "
                            f"{', '.join(taken[:3])} in the user database")
    workdir = Path(tempfile.mkdtemp(prefix="probe-", dir=scratch_root()))
    uid, own = UIDS.take()
    try:
        hand_over(workdir, uid)
        plan = plan_for(workdir, uid)
        probe = "import os, socket; open('probe', 'w').write('ok'); print(os.getuid())"
        done = subprocess.run([sys.executable, "-c", probe], cwd=workdir, capture_output=True,
                              text=True, timeout=60, preexec_fn=plan.apply_in_child,
                              env={"PATH": os.environ.get("PATH", os.defpath)})
        if done.returncode != 0 or done.stdout.strip() != str(uid):
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return _unavailable(f"an isolated Python did not run: {last[:200]}")
        return Availability(True)
    except (OSError, subprocess.SubprocessError) as exc:
        return _unavailable(f"{type(exc).__name__}: {exc}")
    finally:
        if own:
            kill_uid(uid)
            UIDS.give_back(uid)
        shutil.rmtree(workdir, ignore_errors=True)


def _users_in_range() -> list[str]:
    return [f"{user.pw_name} ({user.pw_uid})" for user in pwd.getpwall()
            if UID_BASE <= user.pw_uid < UID_BASE + UID_COUNT]


def _unavailable(reason: str) -> Availability:
    log.warning("sandbox: candidates run without uid/network/filesystem isolation: %s", reason,
                exc_info=sys.exc_info()[0] is not None)
    return Availability(False, reason)
