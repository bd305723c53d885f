"""The task folder as a content-addressed bundle: packed once by the run, unpacked once per Dask
worker into a cache keyed by its hash, so workers need no copy of the task and no shared filesystem.

`pack_task` reads the folder the way the sandbox copies it (`__pycache__` and `*.pyc` left out)
into an uncompressed tar with fixed metadata (sorted names, mtime 0, owner 0, mode 644/755), so
the same files give the same bytes; the bundle's `digest` is that tar's sha256 and its `data` the
tar gzip-compressed. A changed file is a new digest, which is a new cache folder on each worker:
a worker never evaluates against an older copy, and needs no restart to get the new one.

What a folder ships is chosen by evaluators/task_files.py: its `.evoforgeignore` (gitignore
syntax) leaves entries out, and a file whose name looks like a secret (`.env`, `*.pem`, `id_rsa`,
...) is refused with one line naming it unless that ignore file leaves it out or lists it with `!`.

What a bundle may hold is bounded: at most `SHIP_LIMIT_MB` of file content, and nothing from
outside the folder. A symbolic link whose target stays inside the folder is kept as a relative
link; one that leaves it (or dangles), and any device, socket or pipe, is refused with one line
that names it, so a link to `~/.ssh` or a `.env` elsewhere never travels. `unpack` extracts with
tarfile's `data` filter (no absolute paths, no links out, no special files) into a temporary
folder beside the cache entry and renames it into place, so two processes unpacking the same
bundle at once leave one complete copy and a reader never sees half of one::

    bundle = pack_task(Path("my_task"))
    local = unpack(bundle, Path("/tmp/cache"))  # /tmp/cache/<digest>/evaluator.py, ...
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evoforge.evaluators.task_files import IGNORE_FILE, SKIPPED_DIRS, SKIPPED_SUFFIXES, TaskFiles

SHIP_LIMIT_MB = 64  # file content a Dask run ships to its workers, at most


class ShipError(ValueError):
    """The task folder cannot be shipped to Dask workers (too large, a link out of it, a device, a
    secret-looking file)."""


@dataclass(frozen=True)
class TaskBundle:
    """A task folder's files as one compressed tar, named by the sha256 of its uncompressed bytes."""

    digest: str
    data: bytes
    files: int
    size: int  # bytes of file content

    def describe(self) -> str:
        """One phrase for the run's start line: files, size and the short hash."""
        return f"{self.files} files, {self.size / 1024:.1f} kB, sha256 {self.digest[:12]}"


def pack_task(root: Path, limit_mb: float = SHIP_LIMIT_MB) -> TaskBundle:
    """The bundle of the task folder `root`; ShipError names what cannot be shipped."""
    real = Path(os.path.realpath(root))
    entries = _scan(real, limit_mb)
    raw = io.BytesIO()
    files = size = 0
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path, link in entries:
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            mode = path.lstat().st_mode
            if link is not None:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
                tar.addfile(info)
            elif stat.S_ISDIR(mode):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                content = path.read_bytes()
                info.size, info.mode = len(content), 0o755 if mode & stat.S_IXUSR else 0o644
                tar.addfile(info, io.BytesIO(content))
                files, size = files + 1, size + len(content)
    tar_bytes = raw.getvalue()
    return TaskBundle(hashlib.sha256(tar_bytes).hexdigest(), gzip.compress(tar_bytes, mtime=0),
                      files, size)


def _scan(root: Path, limit_mb: float) -> list[tuple[str, Path, str | None]]:
    """(relative name, path, relative link target or None) of every entry the ignore file keeps,
    sorted; refuses what cannot travel, an unlisted secret-looking file and a folder over the
    limit before reading any file."""
    found: list[tuple[str, Path, str | None]] = []
    total = 0
    rules = TaskFiles.of(root)
    for here, dirs, names in os.walk(root):
        base = Path(here)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS
                         and not rules.ignored((base / d).relative_to(root).as_posix(), is_dir=True))
        for name in [*dirs, *sorted(n for n in names if not n.endswith(SKIPPED_SUFFIXES))]:
            path = base / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            if name not in dirs and rules.ignored(rel):
                continue
            secret = None if stat.S_ISDIR(info.st_mode) else rules.unlisted_secret(rel)
            if secret is not None:
                raise ShipError(f"task folder {root}: {rel} looks like a secret ({secret}) and would be "
                                f"shipped to every Dask worker: leave it out in {IGNORE_FILE}, or list it "
                                f"there as !{rel} to ship it")
            if stat.S_ISLNK(info.st_mode):
                found.append((rel, path, _inner_link(root, path, rel)))
                if name in dirs:
                    dirs.remove(name)  # its files are the target's, shipped where they live
            elif stat.S_ISDIR(info.st_mode):
                found.append((rel, path, None))
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                found.append((rel, path, None))
            else:
                raise ShipError(f"task folder {root}: {rel} is not a regular file, folder or link; "
                                "Dask workers get only the folder's files")
    if total > limit_mb * 2**20:
        raise ShipError(f"task folder {root} holds {total / 2**20:.1f} MB of files, over the "
                        f"{limit_mb:g} MB a Dask run ships to its workers (SHIP_LIMIT_MB): keep large "
                        "data out of the task folder, where the evaluator can fetch it")
    found.sort(key=lambda entry: entry[0])
    return found


def _inner_link(root: Path, link: Path, rel: str) -> str:
    """The link's target relative to the link's folder, when it resolves inside `root`."""
    target = os.path.realpath(link)
    if not os.path.exists(target):
        raise ShipError(f"task folder {root}: the link {rel} points to {os.readlink(link)}, which does not "
                        "exist")
    if os.path.commonpath([target, str(root)]) != str(root) or target == str(root):
        raise ShipError(f"task folder {root}: the link {rel} points outside the folder (to {target}); "
                        "Dask workers get only the folder's own files: copy the file in instead")
    return os.path.relpath(target, os.path.realpath(link.parent))


def unpack(bundle: TaskBundle, cache: Path) -> Path:
    """The bundle's folder under `cache` (`cache/<digest>`), extracted now unless already there."""
    dest = cache / bundle.digest
    if dest.is_dir():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    tar_bytes = gzip.decompress(bundle.data)
    if hashlib.sha256(tar_bytes).hexdigest() != bundle.digest:
        raise ShipError(f"the shipped task bundle {bundle.digest[:12]} does not match its hash")
    staging = Path(tempfile.mkdtemp(prefix=f".{bundle.digest[:12]}-", dir=cache))
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r") as tar:
            tar.extractall(staging, filter="data")
        os.rename(staging, dest)
    except OSError:
        if not dest.is_dir():  # not another process's copy that won the rename
            raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return dest
