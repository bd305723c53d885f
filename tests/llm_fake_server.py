"""A scriptable OpenAI-compatible server for the endpoint tests: what it lists on /v1/models, what
it says on /props or /openapi.json, and how it answers each chat request (an answer, cut off,
late, or never); it records every request it got (path, bearer token, body)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-model"


@dataclass
class Reply:
    """How the server answers one chat request."""

    text: str = "ok"
    finish: str = "stop"
    usage: tuple[int, int] = (100, 10)  # prompt, completion tokens
    delay_s: float = 0.0
    hang: bool = False  # never answer (until the server stops)
    status: int = 200
    cached: int = 0  # usage.prompt_tokens_details.cached_tokens
    raw: bytes | None = None  # this body instead of a chat completion


def answers(*replies: Reply) -> Callable[[int, dict[str, Any]], Reply]:
    """The n-th chat request gets the n-th reply (the last one from then on)."""
    return lambda n, _body: replies[min(n, len(replies) - 1)]


class FakeServer:
    """Serves `MODEL`; `entry` extends its /v1/models entry, `props` is served on /props and `title`
    on /openapi.json when given (else 404), `reply` decides each chat answer; with `hang_gets`
    its GETs never answer either (a hung process)."""

    def __init__(self, reply: Callable[[int, dict[str, Any]], Reply] | None = None,
                 entry: dict[str, Any] | None = None, props: dict[str, Any] | None = None,
                 title: str | None = None, hang_gets: bool = False) -> None:
        self.reply = reply or answers(Reply())
        self.entry, self.props, self.title = entry or {}, props, title
        self.hang_gets = hang_gets
        self.requests: list[tuple[str, str, dict[str, Any]]] = []  # (path, bearer token, body)
        self.chats: list[dict[str, Any]] = []  # the chat request bodies, in order
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.requests]

    def _chat(self, body: dict[str, Any]) -> tuple[Reply, dict[str, Any]]:
        with self._lock:
            n = len(self.chats)
            self.chats.append(body)
        reply = self.reply(n, body)
        details = {"prompt_tokens_details": {"cached_tokens": reply.cached}} if reply.cached else {}
        return reply, {
            "id": f"fake-{n}", "object": "chat.completion", "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text},
                         "finish_reason": reply.finish}],
            "usage": {"prompt_tokens": reply.usage[0], "completion_tokens": reply.usage[1],
                      "total_tokens": sum(reply.usage), **details}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _note(self, body: dict[str, Any]) -> None:
                token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                with owner._lock:
                    owner.requests.append((self.path, token, body))

            def _send(self, body: dict[str, Any], status: int = 200) -> None:
                raw = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up on it

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._note({})
                if owner.hang_gets:
                    owner._stop.wait()
                    return
                if self.path == "/v1/models":
                    entry = {"id": MODEL, "object": "model", "owned_by": "fake", **owner.entry}
                    self._send({"object": "list", "data": [entry]})
                elif self.path == "/props" and owner.props is not None:
                    self._send(owner.props)
                elif self.path == "/openapi.json" and owner.title is not None:
                    self._send({"openapi": "3.1.0", "info": {"title": owner.title}})
                else:
                    self._send({"detail": "Not Found"}, 404)

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                self._note(body)
                reply, answer = owner._chat(body)
                if reply.hang:
                    owner._stop.wait()
                    return
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.raw is not None:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(reply.raw)))
                    self.end_headers()
                    self.wfile.write(reply.raw)
                    return
                if reply.status != 200:
                    self._send({"error": {"message": "fake failure", "type": "server_error"}}, reply.status)
                    return
                self._send(answer)

        return Handler
