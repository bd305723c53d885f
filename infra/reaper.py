"""A watchdog that stops the processes a run leaves behind when it dies, even by SIGKILL.

`start_reaper()` marks the calling process's environment with a fresh token (every process it
starts afterwards inherits it: Prefect's ephemeral server is started with `{**os.environ, ...}`)
and starts a small watchdog in its own session, holding the read end of a pipe whose write end
only the caller has. The pipe's EOF means the caller is gone, however it ended. The watchdog
then waits until the caller is really dead (gone or a zombie, its start time guards against pid
reuse) and stops:

- every process that carries the token in its environment (the Prefect server, any helper the
  run started with its environment, at any depth);
- every process of a session that a child of the caller led (evaluation children are started in
  a session of their own and die with their parent by PR_SET_PDEATHSIG; what they forked stays
  in their session). The watchdog notes the caller's children every `SCAN_S` seconds.

It stops them with SIGKILL: the run is gone, so they have no one left to serve, and a SIGTERMed
Prefect server prints its shutdown tracebacks on the terminal the run was started from (its
sqlite database survives a SIGKILL as it survives a power cut).

A clean exit leaves nothing for it to do (Prefect stops its server at exit) and it exits at once.
The caller's children are found in /proc, so this is Linux only; elsewhere `start_reaper`
returns None. Example::

    reaper = start_reaper()   # before Prefect starts its server
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

TOKEN_ENV = "EVOFORGE_REAPER_TOKEN"
SCAN_S = 0.5  # how often the watchdog notes the caller's children (each scan reads /proc: ~1 ms)
GONE_S = 5.0  # how long the watchdog waits for what it killed to be gone before it reports


@dataclass(frozen=True)
class Proc:
    """One process as /proc/<pid>/stat shows it; `start` (clock ticks after boot) tells a
    process from a later one that got the same pid."""

    pid: int
    ppid: int
    sid: int
    start: int
    zombie: bool


def read_proc(pid: int) -> Proc | None:
    """The process `pid`, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return Proc(pid, ppid=int(fields[1]), sid=int(fields[3]), start=int(fields[19]),
                zombie=fields[0] in ("Z", "X"))


def processes() -> Iterator[Proc]:
    """Every live process."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            proc = read_proc(int(entry.name))
            if proc is not None and not proc.zombie:
                yield proc


def started_with(pid: int, entry: str) -> bool:
    """True when the environment `pid` started with holds `entry` (``NAME=value``)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry.encode() in f.read().split(b"\0")
    except OSError:
        return False


def alive(proc: Proc) -> bool:
    """True while `proc` (that very process, not a later one with its pid) is running."""
    now = read_proc(proc.pid)
    return now is not None and now.start == proc.start and not now.zombie


@dataclass
class Reaper:
    """The caller's handle on its watchdog: the pipe's write end, held open until exit."""

    proc: subprocess.Popen
    lifeline: int
    token: str


def start_reaper() -> Reaper | None:
    """Start the watchdog of this process (once per process); None where /proc is missing."""
    me = read_proc(os.getpid())
    if me is None:
        return None
    token = uuid.uuid4().hex
    os.environ[TOKEN_ENV] = token  # before anything else starts, so that every child inherits it
    read_end, write_end = os.pipe()  # both close-on-exec: only the watchdog gets the read end
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evoforge.infra.reaper", str(me.pid), str(me.start), token],
            stdin=read_end, stdout=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(read_end)
    return Reaper(proc, write_end, token)


def _wait_for_eof(lifeline: int, parent: Proc, sessions: dict[int, Proc]) -> None:
    """Note the parent's session-leading children until the lifeline reads EOF."""
    while True:
        readable, _, _ = select.select([lifeline], [], [], SCAN_S)
        if readable and not os.read(lifeline, 4096):
            return
        if not alive(parent):  # a child forked without exec may hold the write end open
            return
        for proc in processes():
            if proc.ppid == parent.pid and proc.sid == proc.pid:
                sessions.setdefault(proc.pid, proc)


def _leftovers(parent: Proc, token: str, sessions: dict[int, Proc]) -> tuple[list[Proc], list[Proc]]:
    """(token carriers, members of noted sessions) still running, this process excluded."""
    carriers, members = [], []
    for proc in processes():
        if proc.pid == os.getpid() or proc.start < parent.start:
            continue
        if started_with(proc.pid, f"{TOKEN_ENV}={token}"):
            carriers.append(proc)
        elif proc.sid in sessions and proc.start >= sessions[proc.sid].start:
            members.append(proc)
    return carriers, members


def _signal(procs: list[Proc], sig: int) -> None:
    for proc in procs:
        if alive(proc):  # checked just before: a pid that came back to another process is spared
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, sig)


def _describe(proc: Proc) -> str:
    try:
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "?"
    return f"{proc.pid} ({cmd[:80]})"


def watch(parent: Proc, token: str, lifeline: int = 0) -> list[str]:
    """The watchdog's work: wait for the parent's end, then stop what it left; returns what it
    stopped, as `pid (command line)`."""
    sessions: dict[int, Proc] = {}
    _wait_for_eof(lifeline, parent, sessions)
    while alive(parent):  # EOF comes first when the parent closes it on its way out
        time.sleep(0.02)
    carriers, members = _leftovers(parent, token, sessions)
    stopped = [_describe(p) for p in carriers + members]
    _signal(carriers + members, signal.SIGKILL)
    deadline = time.monotonic() + GONE_S
    while any(alive(p) for p in carriers + members) and time.monotonic() < deadline:
        time.sleep(0.02)
    return stopped


def main(argv: list[str]) -> int:
    """`python -m evoforge.infra.reaper PID START TOKEN`, stdin being the lifeline."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl+C is for the run, which then exits
    pid, start, token = int(argv[0]), int(argv[1]), argv[2]
    parent = read_proc(pid)
    if parent is None or parent.start != start:  # it died before we started: use what we know
        parent = Proc(pid, ppid=0, sid=0, start=start, zombie=True)
    stopped = watch(parent, token)
    if stopped:
        with contextlib.suppress(BrokenPipeError):  # nobody reads the run's terminal any more
            print(f"[evoforge] process {pid} ended; stopped {len(stopped)} process(es) it left: "
                  + ", ".join(stopped), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
