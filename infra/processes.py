"""Ending a child process that was asked to stop: wait for it, then SIGKILL it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def wait_or_kill(proc: subprocess.Popen, timeout_s: float = 5.0) -> int:
    """Wait up to ``timeout_s`` for ``proc`` to exit (it was asked to), else kill it; its code."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def own_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a live process has used itself, its children left out
    (0.0 when it is gone or /proc is not there)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
