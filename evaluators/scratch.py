"""Where sandboxed children's private directories live: one scratch root per user.

As root, ``<tmp>/evoforge-sandbox``: root-owned and enterable (0711) so that each dedicated uid
reaches its own directory, on a tmpfs. As any other user, ``<tmp>/evoforge-sandbox-<uid>``,
created 0700 and refused (``ScratchError``, one line) when it is a symlink or another uid's, so
two users' runs on one machine never share, block or hijack one path.

An isolated child (either kind) writes into a tmpfs of its own: ``limit_workdir`` mounts one of
``scratch_mb`` on its private directory in its own mount namespace and copies in what was
prepared there, so a candidate that fills it gets "No space left on device" alone (the parent
keeps its own view of the directory, and reads the result from a pipe, not from it). Example::

    workdir = tempfile.mkdtemp(prefix="evoforge-eval-", dir=scratch_root())
    limit_workdir(str(workdir), 1024, owner=57001)   # in the child, before it drops root
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import stat
import tempfile
from functools import cache
from pathlib import Path

from evoforge.evaluators.mounts import LIBC, MS, IsolationError, mount

log = logging.getLogger(__name__)

_SCRATCH_TMPFS = b"mode=0711,size=25%"  # the private directories' tmpfs (a quarter of the RAM at most)
DEFAULT_SCRATCH_MB = 1024  # what one isolated evaluation may write (sandbox.scratch_mb)
_INODES_PER_MB = 64  # files a scratch tmpfs may hold per MB (an inode costs kernel memory, not size)


class ScratchError(RuntimeError):
    """The sandbox's scratch root cannot be used safely (someone else's, or a symlink)."""


def scratch_root() -> Path:
    """Where isolated children's private directories live. As root: a root-owned, enterable
    directory on a tmpfs (a disk's journal makes creating and deleting them cost milliseconds);
    as another user: ``<tmp>/evoforge-sandbox-<uid>``, 0700, this uid's own (ScratchError if not)."""
    base = Path(tempfile.gettempdir())
    if os.geteuid() == 0:
        return _scratch_at(base / "evoforge-sandbox")
    return _own_scratch(base / f"evoforge-sandbox-{os.geteuid()}")


@cache
def _scratch_at(root: Path) -> Path:
    root.mkdir(mode=0o711, exist_ok=True)
    if LIBC is not None and os.geteuid() == 0:
        with open(root.parent / ".evoforge-sandbox.lock", "a") as lock:  # one mount, whoever comes first
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.ismount(root):
                try:
                    mount(b"tmpfs", str(root).encode(), b"tmpfs", MS["nosuid"] | MS["nodev"],
                          _SCRATCH_TMPFS)
                except IsolationError as exc:
                    log.info("sandbox: private directories stay on %s's filesystem: %s", root, exc)
    return root


@cache
def _own_scratch(root: Path) -> Path:
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    found = os.lstat(root)
    if not stat.S_ISDIR(found.st_mode):
        raise ScratchError(f"sandbox scratch {root} is not a directory (a symlink?): refusing to use "
                           "it; remove it or set TMPDIR elsewhere")
    if found.st_uid != os.geteuid():
        raise ScratchError(f"sandbox scratch {root} belongs to uid {found.st_uid}, not to this user "
                           f"({os.geteuid()}): refusing to use it; remove it or set TMPDIR elsewhere")
    if stat.S_IMODE(found.st_mode) != 0o700:
        os.chmod(root, 0o700)
    return root


def limit_workdir(workdir: str, size_mb: int, owner: int | None = None) -> None:
    """In a child's own mount namespace: put a tmpfs of ``size_mb`` on ``workdir`` and copy into
    it what was prepared there (owned by ``owner``, the dedicated uid, when given)."""
    prepared = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        options = f"mode=0700,size={size_mb}m,nr_inodes={max(4096, size_mb * _INODES_PER_MB)}"
        if owner is not None:
            options += f",uid={owner},gid={owner}"
        mount(b"tmpfs", workdir.encode(), b"tmpfs", MS["nosuid"] | MS["nodev"], options.encode())
        try:
            shutil.copytree(f"/proc/self/fd/{prepared}", workdir, symlinks=True, dirs_exist_ok=True)
        except (OSError, shutil.Error) as exc:  # e.g. the task folder is larger than the tmpfs
            raise IsolationError(getattr(exc, "errno", None) or errno.EIO,
                                 f"copying the prepared files into a scratch tmpfs of {size_mb} MB "
                                 f"(sandbox.scratch_mb): {exc}") from exc
    finally:
        os.close(prepared)
    if owner is not None:
        for base, dirs, files in os.walk(workdir):
            for name in dirs + files:
                os.chown(os.path.join(base, name), owner, owner, follow_symlinks=False)
