"""A counting proxy in front of one OpenAI-compatible server, so that every system is measured the same way.

Each `Lane` listens on its own loopback port and forwards every request unchanged to the upstream
server; a lane counts the chat completions it forwarded, the tokens the upstream reported in
`usage`, the failures and the seconds spent. Give the task model and the proposer of one system
two lanes and the counts come apart without trusting what the system reports about itself::

    with Lanes("http://127.0.0.1:8080/v1", ["task", "proposer"]) as lanes:
        run_system(task_url=lanes["task"].base_url, proposer_url=lanes["proposer"].base_url)
        print(lanes.counts())   # {"task": {"calls": 60, ...}, "proposer": {...}}
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Lane:
    """One loopback port forwarding to the upstream, with its own counters."""

    def __init__(self, name: str, upstream: str,
                 rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.name = name
        self.upstream = upstream.rstrip("/")
        self.rewrite = rewrite  # applied to each chat request's JSON body before it is forwarded
        self.lock = threading.Lock()
        self.reset()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"lane-{name}", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def reset(self) -> None:
        """Zero the counters (between two systems sharing the lane)."""
        with self.lock:
            self.calls = self.failures = self.tokens_in = self.tokens_out = 0
            self.seconds = 0.0

    def counts(self) -> dict[str, Any]:
        with self.lock:
            return {"calls": self.calls, "failures": self.failures, "tokens_in": self.tokens_in,
                    "tokens_out": self.tokens_out, "llm_s": round(self.seconds, 1)}

    def record(self, path: str, status: int, body: bytes, seconds: float) -> None:
        """Count one forwarded request (chat completions only; model listings are free)."""
        if not path.rstrip("/").endswith("completions"):
            return
        usage: dict[str, Any] = {}
        if status == 200:
            try:
                usage = json.loads(body).get("usage") or {}
            except (ValueError, AttributeError):
                usage = {}
        with self.lock:
            self.calls += 1
            self.failures += status != 200
            self.tokens_in += int(usage.get("prompt_tokens") or 0)
            self.tokens_out += int(usage.get("completion_tokens") or 0)
            self.seconds += seconds


def _handler(lane: Lane) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet: the counters are the record
            return

        def _forward(self, body: bytes | None) -> None:
            path = self.path[3:] if self.path.startswith("/v1") else self.path
            request = urllib.request.Request(lane.upstream + path, data=body, method=self.command,
                                             headers={"Content-Type": "application/json"})
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=600) as answer:
                    status, payload = answer.status, answer.read()
            except urllib.error.HTTPError as err:
                status, payload = err.code, err.read()
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                status, payload = 502, json.dumps({"error": {"message": str(err)}}).encode()
            lane.record(path, status, payload, time.perf_counter() - start)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._forward(None)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if lane.rewrite is not None and self.path.rstrip("/").endswith("completions"):
                body = json.dumps(lane.rewrite(json.loads(body))).encode()
            self._forward(body)

    return Handler


class Lanes:
    """Several named lanes to one upstream, started and stopped together (a context manager)."""

    def __init__(self, upstream: str, names: list[str],
                 rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.lanes = {name: Lane(name, upstream, rewrite) for name in names}

    def __getitem__(self, name: str) -> Lane:
        return self.lanes[name]

    def __enter__(self) -> Lanes:
        for lane in self.lanes.values():
            lane.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for lane in self.lanes.values():
            lane.server.shutdown()
            lane.server.server_close()

    def reset(self) -> None:
        for lane in self.lanes.values():
            lane.reset()

    def counts(self) -> dict[str, dict[str, Any]]:
        return {name: lane.counts() for name, lane in self.lanes.items()}
