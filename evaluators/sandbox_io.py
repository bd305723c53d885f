"""The sandbox's pipes: the child's stdout/stderr tails and its result pipe (whole or JSON lines).

``ChildProtocol`` keeps the last bytes of stdout and stderr and resolves futures when the child
exits and its pipes close; ``ResultProtocol`` reads the result pipe to EOF (one JSON object, at
most ``MAX_PAYLOAD_BYTES``) or hands each JSON-object line to an ``on_line`` hook as it arrives.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

MAX_PAYLOAD_BYTES = 16 * 1024 * 1024


class _Tail:
    """Keeps the last ``size`` bytes of a stream."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.size:
            del self.data[: len(self.data) - self.size]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class ChildProtocol(asyncio.SubprocessProtocol):
    """Collects stdout/stderr tails and signals the child's exit and the pipes' closing."""

    def __init__(self, output_bytes: int) -> None:
        loop = asyncio.get_running_loop()
        self.tails = {1: _Tail(output_bytes), 2: _Tail(output_bytes)}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.tails[fd].add(data)

    def process_exited(self) -> None:
        _resolve(self.exited)

    def connection_lost(self, exc: Exception | None) -> None:
        _resolve(self.closed)


class ResultProtocol(asyncio.Protocol):
    """Reads the result pipe to EOF (at most the payload cap), or line by line into ``on_line``."""

    def __init__(self, on_line: Callable[[dict], bool] | None = None) -> None:
        self.data = bytearray()
        self.overflow = False
        self.on_line = on_line
        self.stream_error: str | None = None
        self.hook_error: BaseException | None = None
        loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.stop: asyncio.Future[None] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        if self.stop.done():
            return
        if len(self.data) + len(data) > MAX_PAYLOAD_BYTES:
            self.overflow = True
            self._halt("a result line is larger than the payload cap")
        else:
            self.data += data
        if self.on_line is not None and b"\n" in data:
            *lines, rest = bytes(self.data).split(b"\n")
            self.data = bytearray(rest)
            for line in lines:
                self._deliver(line)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.on_line is not None:
            self._deliver(bytes(self.data))  # a last line without its newline
        _resolve(self.closed)

    def _deliver(self, line: bytes) -> None:
        if self.stop.done() or not line.strip():
            return
        value = _parse_json(line)
        if not isinstance(value, dict):
            self._halt(f"unreadable result line: {line[:200].decode('utf-8', 'replace')!r}")
            return
        try:
            keep_going = self.on_line(value)  # type: ignore[misc]
        except BaseException as exc:  # re-raised by run_sandboxed once the child is dead
            self.hook_error = exc
            keep_going = False
        if keep_going is False:
            _resolve(self.stop)

    def _halt(self, reason: str) -> None:
        if self.on_line is not None:
            self.stream_error = reason
            _resolve(self.stop)

    def payload(self) -> dict | None:
        if self.on_line is not None or self.overflow or not self.data:
            return None
        value = _parse_json(bytes(self.data))
        return value if isinstance(value, dict) else None


def _parse_json(data: bytes) -> object:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
