"""An OpenAI-compatible server for tests that answers every chat request cut off at max_tokens
(finish_reason "length") with a fixed usage block, and adds up the usage it reported."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.json_handler import JsonHandler


class CutOffServer:
    """Serves model `model`; every chat answer is cut off and reports `usage` (prompt, completion)."""

    def __init__(self, model: str = "cutoff-model", usage: tuple[int, int] = (1234, 567)) -> None:
        self.model, self.usage = model, usage
        self.calls = self.tokens_in = self.tokens_out = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> CutOffServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def answer(self) -> dict[str, Any]:
        """One chat completion, cut off, its usage counted."""
        with self._lock:
            self.calls += 1
            self.tokens_in += self.usage[0]
            self.tokens_out += self.usage[1]
        return {"id": f"cut-{self.calls}", "object": "chat.completion", "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "def f(x):\n    return"},
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": self.usage[0], "completion_tokens": self.usage[1],
                          "total_tokens": sum(self.usage)}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(JsonHandler):

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._send({"object": "list", "data": [{"id": owner.model, "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(owner.answer())

        return Handler
