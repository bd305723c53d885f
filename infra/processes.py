"""Ending a child process that was asked to stop: wait for it, then SIGKILL it."""

from __future__ import annotations

import subprocess


def wait_or_kill(proc: subprocess.Popen, timeout_s: float = 5.0) -> int:
    """Wait up to ``timeout_s`` for ``proc`` to exit (it was asked to), else kill it; its code."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
