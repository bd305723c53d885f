"""The mount and namespace calls both isolation kinds make in a sandbox child (raw libc, no tools).

A child isolated as root (isolation.py) or in its own user namespace (userns.py) remounts every
mount it inherited read-only, keeping each mount's own flags (in a user namespace they are
locked: changing them is refused), and *covers* directories it must not look into with an empty
tmpfs onto which only the paths it needs are bound back. Example::

    cover = Cover("/root", expose=("/root/.pyenv/versions/3.11.7",))
    apply_cover(cover)      # in the child's own mount namespace
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
# evoforge's own package folders (an editable install maps each of them; a wheel has them in one)
PACKAGE_DIRS = tuple(PACKAGE_ROOT / name for name in ("flows", "stages", "evaluators", "cognition", "infra"))
LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
MS = {"ro": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024, "nodiratime": 2048,
      "relatime": 1 << 21, "strictatime": 1 << 24}
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_COVER_TMPFS = b"mode=0755,size=1m"


class IsolationError(OSError):
    """A namespace or mount call failed in the child (raised before exec)."""


@dataclass(frozen=True)
class Mount:
    path: str
    flags: int  # the mount's own flags (nosuid, nodev, ...), kept when it is made read-only


@dataclass(frozen=True)
class Cover:
    """A directory hidden by a tmpfs that exposes only ``expose`` (read-only) and ``writable``."""

    directory: str
    expose: tuple[str, ...]
    writable: tuple[str, ...] = ()


def call(what: str, rc: int) -> None:
    """Raise IsolationError naming ``what`` when a libc call returned non-zero."""
    if rc != 0:
        errno = ctypes.get_errno()
        raise IsolationError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int,
          data: bytes | None = None) -> None:
    """mount(2), raising IsolationError."""
    call(f"mount {target.decode(errors='replace')}", LIBC.mount(source, target, fstype, flags, data))


def remount_read_only(mount_: Mount) -> None:
    """Make one mount read-only in this mount namespace, keeping its own (maybe locked) flags."""
    mount(None, mount_.path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | mount_.flags)


def apply_cover(cover: Cover, read_only_binds: bool = True) -> None:
    """Cover ``cover.directory`` with a tmpfs and bind its exposed paths back (``expose``
    read-only: remounted so unless ``read_only_binds`` is False, when their source mounts are
    read-only already; ``writable`` as they are)."""
    paths = [*cover.expose, *cover.writable]
    fds = [os.open(path, os.O_PATH | os.O_CLOEXEC) for path in paths]
    try:
        mount(b"tmpfs", cover.directory.encode(), b"tmpfs", MS["nosuid"] | MS["nodev"], _COVER_TMPFS)
        for path, fd in zip(paths, fds, strict=True):
            target = Path(path)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC)
            if read_only_binds and path in cover.expose:
                mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        mount(None, cover.directory.encode(), None, MS_REMOUNT | MS_RDONLY | MS["nosuid"] | MS["nodev"])
    finally:
        for fd in fds:
            os.close(fd)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def current_mounts() -> tuple[Mount, ...]:
    """This process's mounts, in mountinfo's order (parents before what is mounted on them)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        flags = 0
        for option in fields[5].split(","):
            flags |= MS.get(option, 0) & ~MS_RDONLY
        mounts.append(Mount(_unescape(fields[4]), flags))
    return tuple(mounts)


def python_prefixes() -> set[Path]:
    """The running Python's prefixes (a venv's and its base interpreter's)."""
    return {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}


def needed_paths(cwd: str | None = None, sys_path: tuple[str, ...] | None = None) -> list[Path]:
    """What a child's Python needs to read: its prefixes, its import path, evoforge's own package
    folders. What only this process imports from is no need: the working directory (``cwd``), the
    first import path entry (the script's folder, or the working directory of ``python -m``), the
    ``PYTHONPATH`` entries (a child's environment has none of them) and evoforge's source checkout
    (an editable install's root: its package folders are named)."""
    entries = list(sys.path if sys_path is None else sys_path)
    paths = {*python_prefixes(), Path(os.path.realpath(sys.executable)).parent, *PACKAGE_DIRS}
    own = [cwd if cwd is not None else os.getcwd(), *entries[:1],
           *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    skip = {Path(p).resolve() for p in own if p and os.path.isabs(p)} | {PACKAGE_ROOT}
    for entry in entries:
        if entry and os.path.isabs(entry) and Path(entry).resolve() not in skip:
            paths.add(Path(entry))
    return sorted({p.resolve() for p in paths if p.exists()})


def outermost(paths: list[Path]) -> list[Path]:
    """``paths`` without those inside another of them."""
    return [p for p in paths if not any(q != p and q in p.parents for q in paths)]
