"""Launch an OpenAI-compatible LLM server as a child process, wait until it serves, stop it cleanly.

One launcher for every kind of server (vLLM on a GPU, llama.cpp for a GGUF file on a CPU): a
`ServerKind` knows its command line, its interpreter and its hints; the rest is shared. The
server runs with its own interpreter (`PYTHON -m MODULE ...`), which may be another virtualenv's,
so its dependencies never meet evoforge's. It is ready when `GET /v1/models` answers. The process
gets its own process group, so a stop reaches its workers too: SIGTERM to the group, then SIGKILL
after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TextIO

import httpx

_ALL_INTERFACES = ("0.0.0.0", "::", "")
_TAIL_LINES = 30


class LaunchError(ValueError):
    """The server could not start: no such interpreter or model, it exited early, or it never answered."""


class ServerKind(ABC):
    """One kind of server: its label, its Python module and how its command line is written."""

    label = "server"
    module = ""
    env_python = ""  # the environment variable naming its interpreter

    @abstractmethod
    def command(self, spec: LaunchSpec) -> list[str]:
        """The server's command line for `spec`."""

    def default_python(self) -> str:
        """Its interpreter when none is named: $env_python, else python3 on PATH."""
        return os.environ.get(self.env_python) or shutil.which("python3") or "python3"

    def missing_hint(self, python: str) -> str:
        """What to do when `python` has no such module (after an early exit)."""
        return ""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host if host not in _ALL_INTERFACES else "", 0))
        return sock.getsockname()[1]


def option_value(args: Sequence[str], name: str) -> str | None:
    """The value of option `name` in `args`, as `name VALUE` or `name=VALUE`; None when absent.

    >>> option_value(["--n_ctx", "4096", "--api-key=k"], "--api-key"), option_value([], "--n_ctx")
    ('k', None)
    """
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return None


def _api_key(args: Sequence[str]) -> str | None:
    """The server's API key from its `--api-key` option or $VLLM_API_KEY (the readiness probe sends it)."""
    return option_value(args, "--api-key") or option_value(args, "--api_key") or \
        os.environ.get("VLLM_API_KEY") or None


def shown_command(command: Sequence[str]) -> str:
    """The command line as it may be printed: an `--api-key` value masked.

    >>> shown_command(["py", "--api-key", "s3cret", "--api-key=x", "--api_key", "y"])
    'py --api-key *** --api-key=*** --api_key ***'
    """
    out, hide = [], False
    for arg in command:
        masked = next((f"{o}=***" for o in ("--api-key", "--api_key") if arg.startswith(f"{o}=")), arg)
        out.append("***" if hide else masked)
        hide = arg in ("--api-key", "--api_key")
    return " ".join(out)


@dataclass(frozen=True)
class LaunchSpec:
    """What to start: the kind of server, the model, its interpreter, the address, its own options."""

    model: str
    python: str
    kind: ServerKind
    host: str = "127.0.0.1"
    port: int = 8000
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 900.0  # a first start downloads and loads the weights
    grace_s: float = 15.0  # SIGTERM, then this long before SIGKILL

    def command(self) -> list[str]:
        """The server's command line."""
        return self.kind.command(self)


@dataclass(frozen=True)
class Served:
    """A server that answered: where to reach it and the models it lists."""

    base_url: str
    models: list[str]


class LLMServer:
    """One server process: its output echoed and the last lines kept for error messages."""

    def __init__(self, spec: LaunchSpec, echo: TextIO | None = None) -> None:
        self.spec = replace(spec, port=spec.port or free_port(spec.host))
        self._echo = echo
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    @property
    def label(self) -> str:
        return self.spec.kind.label

    @property
    def base_url(self) -> str:
        """The URL evoforge runs use (`--llm-base-url`); the host's name when it listens everywhere."""
        host = socket.getfqdn() if self.spec.host in _ALL_INTERFACES else self.spec.host
        return f"http://{host}:{self.spec.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the process (its own session and process group); raises LaunchError."""
        python = os.path.expanduser(self.spec.python)
        resolved = shutil.which(python) if os.sep not in python else python
        if not resolved or not os.access(resolved, os.X_OK) or os.path.isdir(resolved):
            raise LaunchError(f"{self.label}'s python not found or not executable: {python} (pass "
                              f"--python PATH/bin/python or set {self.spec.kind.env_python})")
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # a server never needs it
        env["PYTHONUNBUFFERED"] = "1"
        self._proc = subprocess.Popen(
            [resolved, *self.spec.command()[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1, env=env,
            start_new_session=True)
        self._reader = threading.Thread(target=self._read, name="llm-server-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self._tail.append(line.rstrip("\n"))
            if self._echo is not None:
                self._echo.write(line)
                self._echo.flush()

    def tail(self) -> str:
        """The last lines the server printed, indented, for an error message."""
        if self._reader is not None:
            self._reader.join(timeout=2)  # the pipe ends once the process is gone
        return "\n".join(f"  | {line}" for line in self._tail) or "  | (no output)"

    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def wait_ready(self, stop: threading.Event) -> Served | None:
        """Poll GET /v1/models until it answers; None when `stop` was set first. Raises
        LaunchError (the server stopped first) when it exits early or the timeout passes."""
        assert self._proc is not None
        probe_host = "127.0.0.1" if self.spec.host in _ALL_INTERFACES else self.spec.host
        url = f"http://{probe_host}:{self.spec.port}/v1/models"
        key = _api_key(self.spec.extra_args)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        deadline = time.monotonic() + self.spec.startup_timeout_s
        while not stop.is_set():
            code = self._proc.poll()
            if code is not None:
                raise LaunchError(self._early_exit(code))
            with contextlib.suppress(httpx.TransportError):
                answer = httpx.get(url, headers=headers, timeout=2.0)
                if answer.status_code == 200:
                    models = [m.get("id", "") for m in answer.json().get("data", [])]
                    return Served(self.base_url, [m for m in models if m])
            if time.monotonic() > deadline:
                self.stop()
                raise LaunchError(
                    f"{self.label} did not answer {url} within {self.spec.startup_timeout_s:g} s (stopped "
                    f"it); its last output lines:\n{self.tail()}")
            stop.wait(0.25)
        return None

    def _early_exit(self, code: int) -> str:
        tail = self.tail()
        top = self.spec.kind.module.split(".")[0]
        missing = f"No module named '{top}'" in tail or f"No module named {top}" in tail
        hint = f"\n{self.spec.kind.missing_hint(self.spec.python)}" if missing else ""
        return (f"{self.label} exited with code {code} before it served /v1/models; its last output "
                f"lines:\n{tail}{hint}".rstrip())

    def wait(self, stop: threading.Event, serve_s: float | None = None) -> int | None:
        """Block until the process exits (its code), `stop` is set or `serve_s` passes (None)."""
        assert self._proc is not None
        deadline = None if serve_s is None else time.monotonic() + serve_s
        while not stop.is_set():
            code = self._proc.poll()
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                return None
            stop.wait(0.25)
        return None

    def stop(self) -> int | None:
        """SIGTERM to the server's process group, SIGKILL after the grace period; its exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.spec.grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with contextlib.suppress(ProcessLookupError):  # workers that outlived the leader
            os.killpg(proc.pid, signal.SIGKILL)
        if self._reader is not None:
            self._reader.join(timeout=2)
        return proc.returncode


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set `stop` inside the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class ServerExited(RuntimeError):
    """The server stopped on its own after it had started serving."""

    def __init__(self, label: str, code: int, tail: str) -> None:
        super().__init__(f"{label} exited on its own with code {code}; its last output lines:\n{tail}")
        self.code = code


def serve(spec: LaunchSpec, stop: threading.Event, on_ready: Callable[[Served], None],
          echo: TextIO | None = None, serve_s: float | None = None) -> Served | None:
    """Start the server, call `on_ready` once it answers, then serve until `stop` is set or
    `serve_s` passes; the server is stopped either way. Returns what it served (None: stopped
    during startup); raises LaunchError when it never served, ServerExited when it exits on its own."""
    server = LLMServer(spec, echo=echo)
    server.start()
    try:
        served = server.wait_ready(stop)
        if served is None:
            return None
        on_ready(served)
        code = server.wait(stop, serve_s)
        if code is not None:
            raise ServerExited(server.label, code, server.tail())
        return served
    finally:
        server.stop()
