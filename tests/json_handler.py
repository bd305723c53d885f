"""The base of the tests' stand-in HTTP servers: a quiet handler that answers with JSON."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and sends JSON bodies (`_send`)."""

    def log_message(self, *args: object) -> None:  # quiet
        return None

    def _send(self, body: Any, status: int = 200) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)
