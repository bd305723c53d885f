"""One writer at a time on a cognition base, across threads and processes: a POSIX lock on a file
in the base's folder (held on a shared file system too: NFS carries POSIX locks), so two runs
writing the same lesson at once store it once. A base at an object-store URI has no such file:
there LanceDB's own commit protocol orders the writes, and readers fold rows of one id into one."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".write.lock"


class WriteLock:
    """The write lock of the base at `folder` (None: a base at a URI, locked only within this process)."""

    def __init__(self, folder: Path | None) -> None:
        self.path = None if folder is None else folder / LOCK_FILE
        self._threads = threading.Lock()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock for the block's writes (and the reads that decide them)."""
        with self._threads:
            if self.path is None:
                yield
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as handle:
                fcntl.lockf(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.lockf(handle, fcntl.LOCK_UN)
