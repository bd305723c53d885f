"""Hostile candidate programs, each with what the sandbox must make of it.

Every entry is the body of the candidate's ``run()`` (it returns the evaluator's metrics dict)
plus the verdict: ``failed`` with a phrase the recorded reason must contain, or ``harmless``
(the candidate scores, and ``score`` is what it may score: its attack found nothing). The
placeholders ``{outside}``, ``{port}``, ``{secret}`` and ``{marker}`` are filled per test run.
``require_isolation()`` is how a test that needs the sandbox's isolation starts: it skips on a
developer's machine without it, fails in CI (``CI=true``), and fails when the isolation is not
the kind ``EVOFORGE_TEST_ISOLATION`` names (the unprivileged tests set it: tests/unprivileged.py).

The *snooping* entries (``probes``) look for a canary planted where a candidate must not see it:
the ``~/.ssh`` of the user running evoforge (``{home}``), the run's workspace (``{workspace}``:
every run's ``nodes.duckdb``, ``mlflow.db`` and programs) and another evaluation's directory in
the scratch root (``{scratch}``, ``{other}``). They never hold the canary themselves (they match
``CANARY_RE``), print one ``PROBE <path>: <status>`` line per place and every match they read;
``probe_problems`` says which places were readable.
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
CANARY_RE = "EVOFORGE-CANARY-[0-9a-f]{16}"  # what a planted canary looks like (never the canary itself)
NOT_READ = ("No such file or directory", "Permission denied", "empty")  # what a probe may see
_PROBE = """
import glob, os, re
def probe(patterns):
    statuses = []
    for pattern in patterns:
        own = os.getcwd() + "/"  # its own directory: what it may read
        for path in [p for p in sorted(glob.glob(pattern)) if not p.startswith(own)] or [pattern]:
            try:
                if os.path.isdir(path):
                    names = [n for n in os.listdir(path) if n != os.path.basename(os.getcwd())]
                    status = "listed " + " ".join(names) if names else "empty"
                else:
                    data = open(path, "rb").read()
                    status = "read " + " ".join(m.decode() for m in re.findall(rb"CANARY_RE", data))
            except OSError as exc:
                status = exc.strerror
            print(f"PROBE {path}: {status}")
            statuses.append(status)
    return {"combined_score": float(sum(not s in NOT_READ for s in statuses))}
""".replace("CANARY_RE", CANARY_RE).replace("NOT_READ", repr(NOT_READ))


@dataclass(frozen=True)
class Hostile:
    name: str
    body: str
    verdict: str  # "failed" or "harmless"
    reason: str = ""  # failed: a phrase of the recorded error
    score: float = 0.0  # harmless: the score it gets when contained
    probes: bool = False  # it prints PROBE lines (see the module doc)


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
    Hostile("read_ssh_keys", _PROBE + """
return probe(["{home}/.ssh/id_*", "{home}/.ssh/id_rsa", "{home}/.ssh"])""",
            "harmless", score=0.0, probes=True),
    Hostile("read_workspace", _PROBE + """
return probe(["{workspace}/*/nodes.duckdb", "{workspace}/mlflow.db", "{workspace}/cognition",
              "{workspace}/*", "{workspace}"])""", "harmless", score=0.0, probes=True),
    Hostile("read_other_candidates", _PROBE + """
return probe(["{other}/initial_program.py", "{scratch}/evoforge-eval-*/*.py", "{scratch}",
              "{workspace}/*/nodes/*/program.py"])""", "harmless", score=0.0, probes=True),
    Hostile("fill_scratch", """
for n in range(256):  # 8 MB files (under the file size limit) until the scratch is full; 2 GB at most
    with open(f"fill-{n}.bin", "wb") as f:
        for _ in range(8):
            f.write(b"\\0" * 2**20)
return {"combined_score": 1.0}""", "failed", "No space left on device"),
    Hostile("remount_and_escape", """
import os
tries = [os.system("mount -o remount,rw / 2>/dev/null"), os.system("unshare -n true 2>/dev/null")]
return {"combined_score": float(sum(code == 0 for code in tries))}""", "harmless", score=0.0),
]


@dataclass(frozen=True)
class Planted:
    """Where the snooping entries look (see the module doc), and the canary planted there."""

    canary: str
    home: Path
    workspace: Path
    scratch: Path
    other: Path

    def fill(self, body: str) -> str:
        for key in ("home", "workspace", "scratch", "other"):
            body = body.replace("{" + key + "}", str(getattr(self, key)))
        return body


def program_text(hostile: Hostile, outside: Path, port: int, marker: str,
                 planted: Planted | None = None) -> str:
    """The candidate program of ``hostile``, its placeholders filled."""
    body = hostile.body.strip("\n")
    if planted is not None:
        body = planted.fill(body)
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


def probe_problems(hostile: Hostile, stdout: str, canary: str) -> list[str]:
    """What a snooping entry could read (empty: it saw only "No such file", "Permission denied" or
    an empty folder, and never the canary)."""
    if not hostile.probes:
        return []
    lines = [line.removeprefix("PROBE ") for line in stdout.splitlines() if line.startswith("PROBE ")]
    found = [line for line in lines if line.rsplit(": ", 1)[-1] not in NOT_READ]
    if canary in stdout:
        found.append("the canary showed in its output")
    return found if lines else ["it printed no PROBE line"]


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
