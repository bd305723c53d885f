"""The warm sandbox's fork server: a Python with a task's imports loaded that forks each evaluation.

Started by evaluators/warm.py as ``python -c "...serve(FD)"`` with a scrubbed environment (it
never holds a secret, so no child can find one in the memory it inherits). ``FD`` is one end
of a SOCK_SEQPACKET socket pair; the other end is the client's alone, and its EOF means the
client is gone: the server then kills its children and exits, however the client ended.

Messages are JSON objects, one per packet. The client first sends ``{"preload": [modules],
"precompile": [evaluator.py], "cgroup_parent": path}``; the server imports the modules in order,
compiles the evaluator and answers ``{"ready": true, "pid": P, "failed": {...}}``, or
``{"ready": false, "threads_after": M}`` when importing ``M`` left a second thread running (a
threaded process cannot fork safely), and exits. Then each request is ``{"argv": [harness
arguments], "workdir": ..., "env": {...}, "rlimits": [[resource, soft, hard], ...], "plan":
isolation plan or null, "max_procs": n, "task_model": bool}`` carrying descriptors (SCM_RIGHTS):
a reply socket, the child's stdout, stderr and result pipe, its end of the task-model link when
``task_model`` (task_model_link.py; descriptor ``TASK_MODEL_FD`` in the child) and the cgroup's
``cgroup.procs`` when the client made one. With a ``cgroup_parent`` the server keeps a *spare*:
a child forked ahead, already in its own session and in a fresh pids cgroup (joining one waits
~8 ms for an RCU grace period, better spent idle), which takes the next request; otherwise it
forks a child per request; a client whose children run in their own user namespace says
``"userns": true`` in its first message, and the server then makes each child (and spare) with
one raw ``clone`` straight into its namespaces, pid 1 of its own pid namespace, the server its
parent (no middle process: userns.py). Either way the child confines itself exactly as the cold
sandbox's ``preexec_fn`` does (its session, the cgroup, namespaces and the dedicated uid, rlimits, death
with the server; in its own user namespace it forks once more, the candidate pid 1 of its own
pid namespace and the server's child mirroring its exit), takes a scrubbed environment and runs
``harness.main`` in-process. The reply
socket gets ``{"pid": N, "cgroup": path or null}`` at once and ``{"exit": code}`` (negative:
killed by that signal) when the child is reaped, both with ``"at"``, the server's
``time.monotonic()`` when it sent them (one clock for the machine: the client times the
evaluation by it, eval_clock.py), or ``{"error": ...}`` when it could not be
started.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import io
import json
import os
import resource
import selectors
import signal
import socket
import sys
import time
import traceback

from evoforge.evaluators import harness
from evoforge.evaluators.isolation import confine, plan_from_json
from evoforge.evaluators.userns import clone_into_namespaces

RESULT_FD = 3  # the result pipe's number in a child
TASK_MODEL_FD = 4  # the task-model link's number in a child that has one
TASK_MODEL_FD_ENV = "EVOFORGE_TASK_MODEL_FD"  # as launch.py names it (this module imports no asyncio)
_LIFT = 16  # a child first moves the descriptors it keeps above this, so no dup2 overwrites one
MAX_MESSAGE = 1 << 20
_MAX_FDS = 8
_SETUP_FAILED = 126  # a child's exit code when it could not confine itself (reason on its stderr)
_SPARE_DEATHS = 3  # spares that die waiting before the server makes no more


def serve(control_fd: int, compat_dir: str) -> None:
    """Preload, then start a child per request until the client's end of ``control_fd`` closes."""
    control = socket.socket(fileno=control_fd)
    sys.path[:] = [compat_dir, *(p for p in sys.path if p and p != compat_dir)]
    base_path = [p for p in sys.path if p != compat_dir]
    message, _ = _receive(control)
    hello = _preload(message.get("preload", []) if message else [])
    harness.warm_up()
    for path in (message or {}).get("precompile", []):
        with contextlib.suppress(OSError, SyntaxError, ValueError):  # a child reports it as cold does
            harness.precompile(path)
    gc.collect()
    gc.freeze()  # the garbage collector of a child leaves what it inherited alone (no copy-on-write)
    _send(control, hello)
    if not hello["ready"]:
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears SIGCHLD
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = _Server((message or {}).get("cgroup_parent"), [compat_dir, *base_path],
                     bool((message or {}).get("userns")))
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    try:
        server.prepare_spare()
        while True:
            for key, _ in selector.select():
                if key.fileobj is control:
                    message, fds = _receive(control)
                    if message is None:  # the client is gone
                        return
                    server.start(message, fds)
                else:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 4096)
            server.reap()
            server.prepare_spare()
    finally:
        server.stop()


class _Spare:
    """A child forked ahead of its request, already in its own session and pids cgroup (moving
    a process into a cgroup waits for an RCU grace period, ~8 ms, better spent idle), or, for a
    client whose children run in their own user namespace, cloned into its namespaces."""

    def __init__(self, pid: int, go: socket.socket, cgroup: str | None, cloned: bool) -> None:
        self.pid, self.go, self.cgroup, self.cloned = pid, go, cgroup, cloned


class _Server:
    """The children of a fork server: the one spare and those running, with their reply sockets."""

    def __init__(self, cgroup_parent: str | None, sys_path: list[str], userns: bool = False) -> None:
        self.cgroup_parent, self.sys_path, self.userns = cgroup_parent, sys_path, userns
        self.children: dict[int, int] = {}  # child pid -> its reply socket's descriptor
        self.spare: _Spare | None = None
        self.made = self.spare_deaths = 0
        self.cgroup_error: str | None = None

    def prepare_spare(self) -> None:
        if self.spare is not None or self.spare_deaths >= _SPARE_DEATHS:
            return
        self.made += 1
        cgroup = None
        if self.cgroup_parent:
            cgroup = os.path.join(self.cgroup_parent, f"evoforge-{os.getpid()}-{self.made}")
            try:
                os.mkdir(cgroup)
            except OSError as exc:  # said in the reply to the request that needed it
                self.cgroup_error, cgroup = f"{cgroup}: {exc}", None
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server = os.getpid()
        try:
            pid = clone_into_namespaces() if self.userns else os.fork()
        except OSError:
            mine.close()
            theirs.close()
            _remove(cgroup)
            return
        if pid == 0:
            mine.close()  # so that the server's end closing (its death) is this spare's EOF
            _wait_as_spare(theirs, cgroup, self.sys_path, server, self.userns)  # never returns
        theirs.close()
        self.spare = _Spare(pid, mine, cgroup, self.userns)

    def start(self, request: dict, fds: list[int]) -> None:
        """Hand the request to the spare (or fork a child for it) and tell the client its pid.
        A client that made no cgroup relies on the spare's: without one, the request fails (the
        client then runs it cold), never a child without its process limit."""
        reply, passed = fds[0], fds[1:]
        client_cgroup = len(passed) > 3 + bool(request.get("task_model"))  # its cgroup.procs is last
        if not client_cgroup and self.cgroup_parent:
            self.prepare_spare()
        spare, self.spare = self.spare, None
        cloned = (request.get("plan") or {}).get("kind") == "userns"  # its own user namespace
        if spare is not None and spare.cloned != cloned:  # made for the other kind of request
            self._discard(spare)
            spare = None
        if not client_cgroup and self.cgroup_parent and (spare is None or spare.cgroup is None):
            if spare is not None:
                self._discard(spare)
            why = self.cgroup_error or f"{self.spare_deaths} spares died waiting"
            _send(reply, {"error": f"no spare child in a pids cgroup could be made: {why}"})
            _close(fds)
            return
        if spare is not None and not client_cgroup:  # no cgroup of the client's: the spare's is used
            try:
                if spare.cgroup is not None:
                    with open(os.path.join(spare.cgroup, "pids.max"), "w") as limit:
                        limit.write(str(int(request.get("max_procs", 64))))
                socket.send_fds(spare.go, [json.dumps(request).encode()], passed)
            except OSError as exc:
                self._discard(spare)
                _send(reply, {"error": f"could not hand the request to a spare child: {exc}"})
                _close(fds)
                return
            spare.go.close()
            _close(passed)
            self.children[spare.pid] = reply
            _send(reply, {"pid": spare.pid, "cgroup": spare.cgroup, "at": time.monotonic()})
            return
        if spare is not None:
            self._discard(spare)
        server = os.getpid()
        try:
            pid = clone_into_namespaces() if cloned else os.fork()
        except OSError as exc:
            _send(reply, {"error": f"fork failed: {exc}"})
            _close(fds)
            return
        if pid == 0:
            _child(request, passed, self.sys_path, server, cloned)  # never returns
        _close(passed)
        self.children[pid] = reply
        _send(reply, {"pid": pid, "cgroup": None, "at": time.monotonic()})

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.spare is not None and pid == self.spare.pid:  # died waiting: another is made
                self.spare_deaths += 1  # (not forever: a cgroup that refuses it would spin)
                self.spare.go.close()
                _remove(self.spare.cgroup)
                self.spare = None
            reply = self.children.pop(pid, None)
            if reply is not None:
                _send(reply, {"exit": os.waitstatus_to_exitcode(status), "at": time.monotonic()})
                os.close(reply)

    def _discard(self, spare: _Spare) -> None:
        spare.go.close()  # its EOF ends it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(spare.pid, 0)
        _remove(spare.cgroup)

    def stop(self) -> None:
        for pid in self.children:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        if self.spare is not None:
            self._discard(self.spare)


def _wait_as_spare(go: socket.socket, cgroup: str | None, sys_path: list[str], server: int,
                   cloned: bool) -> None:
    """In a spare: its own session and cgroup now, then wait for the request (EOF: exit)."""
    try:
        os.setsid()
        if cgroup is not None:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
        request, fds = _receive(go)
    except BaseException:  # noqa: BLE001 - a spare that cannot wait is never used; why: the server's log
        with contextlib.suppress(OSError):
            os.write(2, ("spare child failed: " + traceback.format_exc()).encode())
        os._exit(_SETUP_FAILED)
    if request is None:
        os._exit(0)
    _child(request, fds, sys_path, server, cloned)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _remove(cgroup: str | None) -> None:
    if cgroup is not None:
        with contextlib.suppress(OSError):
            os.rmdir(cgroup)


def _preload(modules: list[str]) -> dict:
    failed = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - reported to the client: the child imports it again
            failed[name] = f"{type(exc).__name__}: {exc}"[:300]
        if _threads() > 1:
            return {"ready": False, "threads_after": name, "pid": os.getpid()}
    return {"ready": True, "pid": os.getpid(), "failed": failed}


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _receive(sock: socket.socket) -> tuple[dict | None, list[int]]:
    data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, _MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


def _send(sock: socket.socket | int, message: dict) -> None:
    data = json.dumps(message).encode()
    if isinstance(sock, int):
        with contextlib.suppress(OSError):  # the client closed its end: nobody is waiting
            os.write(sock, data)
    else:
        sock.send(data)


def _child(request: dict, fds: list[int], sys_path: list[str], server: int, cloned: bool = False) -> None:
    """Confine this forked process as the cold sandbox confines its children, then run the harness
    (``cloned``: it was made in its own namespaces, pid 1 there: userns.py)."""
    try:
        if os.getsid(0) != os.getpid():  # a spare is a session leader already
            os.setsid()
        stdout, stderr, result, *rest = fds
        link = [rest.pop(0)] if request.get("task_model") else []
        if rest:  # its cgroup.procs: first, before the dup2s below take descriptors over
            os.write(rest[0], str(os.getpid()).encode())
        kept = [os.open(os.devnull, os.O_RDONLY), stdout, stderr, result, *link]  # to 0, 1, 2, 3, 4
        kept = [fcntl.fcntl(fd, fcntl.F_DUPFD, _LIFT) for fd in kept]
        for target, fd in enumerate(kept):
            os.dup2(fd, target)
        os.closerange(len(kept), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGINT):
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        plan = plan_from_json(request["plan"]) if request.get("plan") else None
        if plan is None:  # (a plan's isolation changes into the folder itself, after its mounts)
            os.chdir(request["workdir"])
        confine(plan, request["rlimits"], server, cloned)
        os.environ.clear()
        os.environ.update({**request["env"], "EVOFORGE_RESULT_FD": str(RESULT_FD)})
        if link:
            os.environ[TASK_MODEL_FD_ENV] = str(TASK_MODEL_FD)
        sys.path[:] = [request["workdir"], *sys_path]
        sys.argv = [harness.__file__, *request["argv"]]
        sys.dont_write_bytecode = True
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - lives as long as the child
        sys.stdout, sys.stderr = _stream(1), _stream(2)
    except BaseException:  # noqa: BLE001 - the child's stderr is where its reason is read
        with contextlib.suppress(OSError):
            os.write(2, ("sandbox setup failed: " + traceback.format_exc()).encode())
        os._exit(_SETUP_FAILED)
    try:
        harness.main(request["argv"])  # ends with os._exit(0)
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a cold harness
        with contextlib.suppress(OSError):
            sys.stderr.write(traceback.format_exc())
        os._exit(1)
    os._exit(0)


def _stream(fd: int) -> io.TextIOWrapper:
    """An unbuffered text stream on ``fd``, as PYTHONUNBUFFERED gives the cold harness."""
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", write_through=True)
