"""Per-run ``pids`` cgroups: the process limit that holds even for root (which ignores RLIMIT_NPROC)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import itertools
import os
import signal
import time
from pathlib import Path

_CGROUP_CLEANUP_S = 5.0
_cgroup_counter = itertools.count()


@functools.cache
def pids_cgroup_parent() -> Path | None:
    """The pids-cgroup directory we may create per-run cgroups in (probed once), or None."""
    own = [line.split(":", 2) for line in _read(Path("/proc/self/cgroup")).splitlines()]
    for line in _read(Path("/proc/self/mounts")).splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        mount, fstype, options = Path(fields[1]), fields[2], fields[3].split(",")
        if fstype == "cgroup" and "pids" in options:  # v1: the pids hierarchy
            rel = next((e[2] for e in own if len(e) == 3 and "pids" in e[1].split(",")), None)
        elif fstype == "cgroup2":  # v2: only where pids is enabled for our children
            rel = next((e[2] for e in own if len(e) == 3 and e[0] == "0"), None)
            if rel is None or "pids" not in _read(mount / rel.lstrip("/") / "cgroup.subtree_control"):
                continue
        else:
            continue
        parent = mount / (rel or "").lstrip("/")
        probe = PidsCgroup.create(parent, 1) if rel is not None else None
        if probe is not None:
            probe.path.rmdir()
            sweep_stale(parent)
            return parent
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def process_limit_mechanism() -> str:
    """How the process limit is enforced here: "cgroup-pids", "rlimit-nproc" or "none"."""
    if os.geteuid() == 0:
        return "cgroup-pids" if pids_cgroup_parent() is not None else "none"
    return "rlimit-nproc"


class PidsCgroup:
    """A per-run pids cgroup: caps the number of tasks and finds every process to kill."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, parent: Path, max_procs: int) -> PidsCgroup | None:
        path = parent / f"evoforge-{os.getpid()}-{next(_cgroup_counter)}"
        try:
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(max_procs))
        except OSError:
            path.rmdir()
            return None
        return cls(path)

    def open_procs_fd(self) -> int:
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def kill_all(self) -> bool:
        """SIGKILL every member; True when the cgroup was already empty."""
        pids = [int(p) for p in _read(self.path / "cgroup.procs").split()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    def try_remove(self) -> bool:
        """Kill the members and rmdir; True once the cgroup is gone."""
        if not self.kill_all():
            return False
        try:
            self.path.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            return exc.errno != errno.EBUSY
        return True

    async def destroy(self) -> None:
        """Kill every member until none is left, then remove the cgroup."""
        for _ in range(int(_CGROUP_CLEANUP_S / 0.005)):
            if self.try_remove():
                return
            await asyncio.sleep(0.005)


def sweep_stale(parent: Path) -> None:
    """Remove per-run cgroups left behind by evoforge processes that died."""
    for path in parent.glob("evoforge-*-*"):
        owner = path.name.split("-")[1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            cgroup = PidsCgroup(path)
            for _ in range(100):
                if cgroup.try_remove():
                    break
                time.sleep(0.01)
