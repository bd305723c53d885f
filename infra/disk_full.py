"""A full disk, recognised wherever it surfaces: an `OSError` with errno ENOSPC or EDQUOT, a
database's error saying so (DuckDB's "No space left on device", SQLite's "database or disk is
full" from MLflow's store), or any of those behind the exception a library raised instead (its
cause or context).

    >>> import errno
    >>> full = OSError(errno.ENOSPC, "No space left on device", "/runs/r1/status.json")
    >>> disk_full_error(RuntimeError("report failed")) is None
    True
    >>> try:
    ...     try:
    ...         raise full
    ...     except OSError:
    ...         raise RuntimeError("the report could not be written")
    ... except RuntimeError as exc:
    ...     disk_full_error(exc) is full
    True
    >>> str(DiskFull.of(full))
    '/runs/r1/status.json: [Errno 28] No space left on device'
    >>> human_bytes(0), human_bytes(3_500_000)
    ('0 B', '3.3 MB')
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
# the same failures as a library words them (DuckDB and SQLite raise their own types with text)
_TEXTS = tuple(os.strerror(code).lower() for code in _ERRNOS) + ("database or disk is full",)
_QUOTED_PATH = re.compile(r'file "([^"]+)"')


class DiskFull(OSError):
    """A write failed because the disk (or the user's quota) is full; `path` is where, if known."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(errno.ENOSPC, message)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[1])

    @classmethod
    def of(cls, exc: BaseException) -> DiskFull:
        """The DiskFull that `exc` (a disk-full error, or one caused by it) stands for."""
        found = disk_full_error(exc) or exc
        if isinstance(found, DiskFull):
            return found
        path = _path_of(found)
        text = f"{type(found).__name__}: {found}" if not isinstance(found, OSError) else (
            f"{found.filename}: [Errno {found.errno}] {found.strerror}" if found.filename
            else f"[Errno {found.errno}] {found.strerror}")
        made = cls(text, path)
        made.__cause__ = exc  # its traceback, wherever the DiskFull is logged
        return made


def _is_full(exc: BaseException) -> bool:
    if isinstance(exc, DiskFull):
        return True
    if isinstance(exc, OSError):  # its errno says it (a message alone is a person's words)
        return exc.errno in _ERRNOS
    return any(text in str(exc).lower() for text in _TEXTS)


def _chain(exc: BaseException | None) -> list[BaseException]:
    """`exc` and every exception behind it (causes, contexts, a group's members), each once."""
    seen: dict[int, BaseException] = {}
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen[id(current)] = current
        todo += [current.__cause__, current.__context__]
        if isinstance(current, BaseExceptionGroup):
            todo += list(current.exceptions)
    return list(seen.values())


def disk_full_error(exc: BaseException | None) -> BaseException | None:
    """The disk-full error in `exc` or behind it (its causes and contexts), or None; a `DiskFull`
    (what the run already said of it) before a library's own error."""
    chain = _chain(exc)
    return (next((e for e in chain if isinstance(e, RunFolderFull)), None)
            or next((e for e in chain if isinstance(e, DiskFull)), None)
            or next((e for e in chain if _is_full(e)), None))


def _path_of(exc: BaseException) -> str | None:
    """The file the failed write was to, when the error says it (an OSError's filename, DuckDB's
    `Could not write file "..."`)."""
    if isinstance(exc, OSError) and exc.filename:
        return str(exc.filename)
    quoted = _QUOTED_PATH.search(str(exc))
    return quoted.group(1) if quoted else None


def human_bytes(count: int) -> str:
    """`count` bytes for a person: 0 B, 512 B, 3.3 MB, 1.2 GB."""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def free_bytes(folder: Path) -> int | None:
    """Bytes free for this user on the disk holding `folder` (its nearest existing parent); None
    when that cannot be read."""
    for place in (folder, *folder.parents):
        if place.exists():
            try:
                return shutil.disk_usage(place).free
            except OSError:
                return None
    return None


class RunFolderFull(DiskFull):
    """The run folder's disk filled: the one line the CLI ends the run with."""

    @classmethod
    def at(cls, folder: Path, exc: BaseException) -> RunFolderFull:
        """For the run in `folder`, stopped by `exc` (a disk-full error or one behind it); the
        write that failed is named when it was outside the folder (MLflow's store, say)."""
        path = DiskFull.of(exc).path
        free = free_bytes(folder)
        space = f"{human_bytes(free)} free" if free is not None else "free space unknown"
        outside = path is not None and not Path(path).resolve().is_relative_to(folder.resolve())
        return cls(f"the run folder {folder} is out of disk space ({space}"
                   + (f"; the write that failed: {path}" if outside else "")
                   + "): nothing recorded is lost; free space and run the same command to resume", path)
