"""A recording proxy in front of a real OpenAI-compatible server: it forwards every request
unchanged and adds up, from the server's own answers, the usage of every chat completion (cut off
or not), and checks each request against the server's context window (prompt + max_tokens)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


@dataclass
class Recorded:
    """What the proxy saw: the server's usage summed over its chat answers, and the requests."""

    chats: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    finishes: dict[str, int] = field(default_factory=dict)
    over_window: list[str] = field(default_factory=list)  # requests whose prompt + max_tokens > window


class UsageProxy:
    """Forwards to `upstream` (a base URL ending in /v1) and records into `recorded`; `window` is
    the server's context window in tokens."""

    def __init__(self, upstream: str, window: int) -> None:
        self.upstream, self.window = upstream.rstrip("/"), window
        self.recorded = Recorded()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> UsageProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _record(self, path: str, request: dict[str, Any] | None, answer: bytes) -> None:
        if not path.endswith("/chat/completions"):
            return
        try:
            data = json.loads(answer)
        except ValueError:
            return
        usage = data.get("usage") or {}
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        finish = str(((data.get("choices") or [{}])[0]).get("finish_reason"))
        asked = int((request or {}).get("max_tokens") or 0)
        with self._lock:
            rec = self.recorded
            rec.chats += 1
            rec.tokens_in += prompt
            rec.tokens_out += completion
            rec.finishes[finish] = rec.finishes.get(finish, 0) + 1
            if prompt + asked > self.window:
                rec.over_window.append(f"prompt {prompt} + max_tokens {asked} > {self.window}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                path = self.path[3:] if self.path.startswith("/v1") else self.path
                url = proxy.upstream + path if self.path.startswith("/v1") else \
                    proxy.upstream[: -len("/v1")] + self.path
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                try:
                    with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers,
                                                                       method=method), timeout=3600) as up:
                        status, answer, kind = up.status, up.read(), up.headers.get("content-type", "")
                except urllib.error.HTTPError as err:
                    status, answer, kind = err.code, err.read(), err.headers.get("content-type", "")
                request = None
                if body:
                    try:
                        request = json.loads(body)
                    except ValueError:
                        request = None
                proxy._record(path if self.path.startswith("/v1") else self.path, request, answer)
                self.send_response(status)
                self.send_header("content-type", kind or "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self) -> None:  # noqa: N802
                self._forward("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

            def log_message(self, *args: object) -> None:
                pass

        return Handler
