"""Hostile candidate programs, each with what the sandbox must make of it.

Every entry is the body of the candidate's ``run()`` (it returns the evaluator's metrics dict)
plus the verdict: ``failed`` with a phrase the recorded reason must contain, or ``harmless``
(the candidate scores, and ``score`` is what it may score: its attack found nothing). The
placeholders ``{outside}``, ``{port}``, ``{secret}`` and ``{marker}`` are filled per test run.
``require_isolation()`` is how a test that needs the sandbox's isolation starts: it skips on a
developer's machine without it, fails in CI (``CI=true``), and fails when the isolation is not
the kind ``EVOFORGE_TEST_ISOLATION`` names (the unprivileged tests set it: tests/unprivileged.py).
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from evoforge.evaluators.isolation import availability
from tests.helpers import processes_mentioning

SECRET = "sk-hostile-corpus-secret-0123456789"


@dataclass(frozen=True)
class Hostile:
    name: str
    body: str
    verdict: str  # "failed" or "harmless"
    reason: str = ""  # failed: a phrase of the recorded error
    score: float = 0.0  # harmless: the score it gets when contained


CORPUS = [
    Hostile("infinite_loop", "while True:\n    pass", "failed", "timed out"),
    Hostile("memory_bomb", "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))",
            "failed", "MemoryError"),
    Hostile("fork_bomb", """
import os, time
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(120)  # {marker}
            os._exit(0)
    except OSError:
        break
return {"combined_score": 1.0}""", "harmless", score=1.0),
    Hostile("deep_recursion", """
import sys
sys.setrecursionlimit(10**7)
def down(n):  # through C calls (map, sum), so the C stack overflows
    return sum(map(down, [n + 1]))
return {"combined_score": down(0)}""", "failed", "killed by SIGSEGV"),
    Hostile("env_secrets", """
import os
leaked = [k for k, v in os.environ.items() if "{secret}" in v or "KEY" in k or "TOKEN" in k]
return {"combined_score": float(len(leaked))}""", "harmless", score=0.0),
    Hostile("proc_environ", """
import os
found = 0
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                found += b"{secret}" in f.read()
        except OSError:
            pass
return {"combined_score": float(found)}""", "harmless", score=0.0),
    Hostile("write_outside", """
import os
wrote = 0
for path in ["{outside}/planted.txt", "/tmp/evoforge-hostile-{marker}", "/dev/shm/../planted-{marker}",
             "/var/tmp/evoforge-hostile-{marker}", os.path.expanduser("~") + "/../../planted-{marker}"]:
    try:
        with open(path, "w") as f:
            f.write("pwned")
        wrote += 1
    except OSError:
        pass
with open("mine.txt", "w") as f:  # its own directory stays writable
    f.write("ok")
return {"combined_score": float(wrote)}""", "harmless", score=0.0),
    Hostile("socket_to_local_server", """
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).sendall(b"hello from a candidate")
    reached = 1.0
except OSError:
    reached = 0.0
return {"combined_score": reached}""", "harmless", score=0.0),
    Hostile("kill_the_parent", """
import os, signal
if os.getppid() == 0:  # pid 1 of its own pid namespace: its parent is out of its sight
    return {"combined_score": 0.0}
try:
    os.kill(os.getppid(), signal.SIGKILL)
    return {"combined_score": 1.0}
except OSError:
    return {"combined_score": 0.0}""", "harmless", score=0.0),
    Hostile("kill_the_run_process", """
import os, signal
killed = 0
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            env = b""
        if b"{secret}" in env or b"{marker}" in cmd:  # the run process: it holds the API key
            try:
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
return {"combined_score": float(killed)}""", "harmless", score=0.0),
    Hostile("huge_output", """
import sys
chunk = "x" * 2**20
for _ in range(200):
    sys.stdout.write(chunk)
    sys.stderr.write(chunk)
return {"combined_score": 1.0}""", "harmless", score=1.0),
    Hostile("segfault", "import ctypes\nctypes.string_at(0)", "failed", "killed by SIGSEGV"),
    Hostile("sys_exit", "import sys\nsys.exit(3)", "failed", "sys.exit(3)"),
    Hostile("nan_score", 'return {"combined_score": float("nan")}', "failed", "not finite"),
    Hostile("escaping_daemon", """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(120)  # {marker}
    os._exit(0)
return {"combined_score": 1.0}""", "harmless", score=1.0),
    Hostile("huge_file", """
with open("big.bin", "wb") as f:
    for _ in range(2048):
        f.write(b"\\0" * 2**20)
return {"combined_score": 1.0}""", "failed", "File too large"),
    Hostile("fd_exhaustion", """
files = []
try:
    while True:
        files.append(open("/dev/null"))
except OSError:
    pass
return {"combined_score": float(len(files) > 100000)}""", "harmless", score=0.0),
    Hostile("inherited_sockets", """
import os, stat
sockets = 0
for name in os.listdir("/proc/self/fd"):
    try:
        sockets += stat.S_ISSOCK(os.fstat(int(name)).st_mode)
    except OSError:
        pass
return {"combined_score": float(sockets)}""", "harmless", score=0.0),
    Hostile("remount_and_escape", """
import os
tries = [os.system("mount -o remount,rw / 2>/dev/null"), os.system("unshare -n true 2>/dev/null")]
return {"combined_score": float(sum(code == 0 for code in tries))}""", "harmless", score=0.0),
]


def program_text(hostile: Hostile, outside: Path, port: int, marker: str) -> str:
    """The candidate program of ``hostile``, its placeholders filled."""
    body = hostile.body.strip("\n")
    for key, value in {"{outside}": str(outside), "{port}": str(port), "{secret}": SECRET,
                       "{marker}": marker}.items():
        body = body.replace(key, value)
    body = body.replace("time.sleep(120)  # " + marker,  # children that show in `ps` by the marker
                        f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', "
                        f"'{marker}'])")
    return ("import os, sys\n# EVOLVE-BLOCK-START\ndef run():\n" + textwrap.indent(body, "    ")
            + "\n# EVOLVE-BLOCK-END\n")


def verdict_problems(hostile: Hostile, ok: bool, score: float | None, error: str | None) -> list[str]:
    """How the recorded outcome differs from ``hostile``'s verdict (empty: as it should be)."""
    if hostile.verdict == "failed":
        if ok:
            return [f"scored {score} instead of failing"]
        return [] if hostile.reason in (error or "") else [f"failed for another reason: {error}"]
    if not ok:
        return [f"failed: {error}"]
    return [] if score == hostile.score else [f"scored {score} (its attack worked), not {hostile.score}"]


def harms(outside: Path, marker: str, connections: int, seen_text: str) -> list[str]:
    """What a candidate did to the host, as found after its evaluation (empty: nothing)."""
    found = [f"planted {p}" for p in outside.iterdir()]
    for root in ("/tmp", "/var/tmp"):
        found += [f"planted {p}" for p in Path(root).glob(f"evoforge-hostile-{marker}*")]
    if connections:
        found.append(f"{connections} connection(s) reached the local server")
    if SECRET in seen_text:
        found.append("the secret showed in its output")
    found += [f"process {pid} left behind" for pid in processes_mentioning(marker)]
    return found


def require_isolation() -> None:
    """Skip unless the sandbox isolates here; in CI fail instead (see the module doc)."""
    avail = availability()
    expected = os.environ.get("EVOFORGE_TEST_ISOLATION")
    if expected:
        assert avail.kind == expected, f"isolation {avail.kind}, not {expected}: {avail.missing}"
    if avail.isolated:
        return
    why = f"isolation unavailable here: {'; '.join(avail.missing) or avail.reason}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(why)
    pytest.skip(why)
