"""Run the LLM simulator as a subprocess for the length of a ``with`` block."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

import httpx

from evoforge.infra.llm_sim.server import SimConfig
from evoforge.infra.processes import wait_or_kill

_START_TIMEOUT_S = 30.0
_DEFAULT_CONFIG = SimConfig()
_LISTENING = re.compile(r"listening on (http://\S+)/v1")


class SimulatorProcess:
    """A simulator subprocess; ``base_url`` is ready for an OpenAI client inside the block.

    >>> with SimulatorProcess(SimConfig(median_s=0.01)) as sim:  # doctest: +SKIP
    ...     client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="x")
    """

    def __init__(
        self, config: SimConfig = _DEFAULT_CONFIG, host: str = "127.0.0.1", port: int | None = None
    ) -> None:
        self.config = config
        self.host = host
        self.port = port or 0
        self.base_url = ""
        self._root = ""
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: IO[bytes] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> SimulatorProcess:
        cfg = self.config
        command = [
            sys.executable, "-m", "evoforge.infra.llm_sim",
            "--host", self.host, "--port", str(self.port), "--model", cfg.model,
            "--median", repr(cfg.median_s), "--sigma", repr(cfg.sigma),
            "--slots", str(cfg.slots), "--error-rate", repr(cfg.error_rate),
            "--error-kinds", ",".join(cfg.error_kinds), "--hang-s", repr(cfg.hang_s),
            "--seed", str(cfg.seed), "--huge-chars", str(cfg.huge_chars),
            "--down-for", repr(cfg.down_for),
        ]  # fmt: skip
        if cfg.down_after is not None:
            command += ["--down-after", str(cfg.down_after)]
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        try:
            self._root = self._wait_for_address()
            self._wait_until_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.base_url = f"{self._root}/v1"
        self.port = int(self._root.rsplit(":", 1)[1])
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            wait_or_kill(self._proc)
        if self._reader is not None:
            self._reader.join(timeout=2)  # the pipe is at EOF once the process has exited
            self._reader = None
        if self._proc is not None and self._proc.stdout is not None:
            self._proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._proc = None

    @property
    def pid(self) -> int:
        """The simulator server's process id (benchmarks read its CPU)."""
        assert self._proc is not None, "the simulator is not running"
        return self._proc.pid

    def stats(self) -> dict[str, Any]:
        """The server's counters (GET /sim/stats)."""
        return httpx.get(f"{self._root}/sim/stats", timeout=10).raise_for_status().json()

    def outage(self, seconds: float) -> None:
        """Take the server down now for `seconds` (inf: until told otherwise; 0: back up)."""
        body = {"seconds": "inf" if seconds == float("inf") else seconds}
        httpx.post(f"{self._root}/sim/outage", json=body, timeout=10).raise_for_status()

    def reset(self, seed: int | None = None) -> None:
        """Zero the server's counters; with ``seed``, also restart its random stream."""
        body = {} if seed is None else {"seed": seed}
        httpx.post(f"{self._root}/sim/reset", json=body, timeout=10).raise_for_status()

    def _wait_for_address(self) -> str:
        """The http://host:port the subprocess prints once it has bound its socket."""
        assert self._proc is not None and self._proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        stdout = self._proc.stdout
        self._reader = threading.Thread(target=lambda: [lines.put(ln) for ln in stdout], daemon=True)
        self._reader.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                match = _LISTENING.search(lines.get(timeout=0.05))
            except queue.Empty:
                self._check_alive()
                continue
            if match:
                return match.group(1)
        raise RuntimeError(f"llm-sim did not start within {_START_TIMEOUT_S:.0f} s")

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if httpx.get(f"{self._root}/v1/models", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"llm-sim at {self._root} did not answer within {_START_TIMEOUT_S:.0f} s")

    def _check_alive(self) -> None:
        assert self._proc is not None
        if self._proc.poll() is None:
            return
        error = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            error = self._stderr.read().decode(errors="replace").strip()
        tail = error.splitlines()[-1] if error else "no error output"
        raise RuntimeError(f"llm-sim exited with code {self._proc.returncode}: {tail}")
