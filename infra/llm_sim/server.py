"""The LLM simulator: an OpenAI-compatible chat server with realistic latency, capacity and errors.

Every request draws its own seeded generator from the server's, in arrival order, so the same
seed and the same request order give the same latencies, errors and answers. Injected errors:
``429`` answers at once (a server at capacity rejects fast) with ``Retry-After: 1``; ``500``
holds a slot for a tenth of a drawn latency, then fails; ``hang`` holds a slot for ``hang_s``
(or until the client gives up) and then answers 504; ``malformed`` is a normal-speed 200 whose
answer cannot be applied; ``truncated`` is an answer cut mid-way with finish_reason ``length``,
``cut`` the same with finish_reason ``stop`` (a proxy that dropped the end); ``bad_json`` a 200
whose body is cut-off JSON; ``huge`` an answer of ``huge_chars`` characters, max_tokens ignored.
An outage (outage.py) answers 503 on chat and models for its length. A client that
disconnects frees its slot, as vLLM aborts the request.
A request that is none of evoforge's own prompts is a task-model call, answered from its system
and last user messages (task_model.py).
``/v1/embeddings`` answers at once, outside the slots, with a unit vector per text that depends
only on the text (384-d unless the request asks for ``dimensions``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import random
import socket
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evoforge.infra.llm_sim.answers import build_answer, malformed_answer
from evoforge.infra.llm_sim.latency import SlotPool, draw_latency
from evoforge.infra.llm_sim.outage import Outage

DEFAULT_ERROR_KINDS = ("429", "500", "hang", "malformed")
ERROR_KINDS = (*DEFAULT_ERROR_KINDS, "truncated", "cut", "bad_json", "huge")
_ANSWER_FAULTS = ("truncated", "cut", "huge")  # a 200 whose text is the fault
_POLL_S = 0.05  # how often a waiting request checks whether its client is still there
_CHARS_PER_TOKEN = 4
EMBEDDING_DIM = 384  # /v1/embeddings: the dimension of the vectors served, unless "dimensions" asks


@dataclass(frozen=True)
class SimConfig:
    """How the simulated server behaves; invalid values raise ValueError with one line."""

    model: str = "evoforge-sim"
    median_s: float = 2.0  # lognormal latency median
    sigma: float = 0.6  # lognormal sigma (heavy tail)
    slots: int = 8  # concurrent requests served; more wait in a FIFO queue
    error_rate: float = 0.0  # fraction of requests that fail
    error_kinds: tuple[str, ...] = DEFAULT_ERROR_KINDS  # drawn uniformly
    hang_s: float = 600.0  # how long a "hang" holds the request open
    seed: int = 0
    huge_chars: int = 2_000_000  # the length of a "huge" answer
    down_after: int | None = None  # an outage starts at chat request down_after + 1 ...
    down_for: float = 30.0  # ... and lasts this many seconds (inf: for good)

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"slots must be at least 1, got {self.slots}")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error rate must be between 0 and 1, got {self.error_rate}")
        if self.median_s < 0 or self.sigma < 0 or self.hang_s < 0:
            raise ValueError("median, sigma and hang seconds must not be negative")
        if self.huge_chars < 1 or (self.down_after is not None and self.down_after < 0):
            raise ValueError("huge chars must be at least 1 and down-after must not be negative")
        if not self.down_for > 0:
            raise ValueError(f"down-for must be more than 0 seconds (inf: for good), got {self.down_for}")
        unknown = [kind for kind in self.error_kinds if kind not in ERROR_KINDS]
        if unknown or not self.error_kinds:
            raise ValueError(
                f"unknown error kinds {unknown or '(none given)'}; choose from {', '.join(ERROR_KINDS)}"
            )


class Simulator:
    """One simulated server's state: its seeded generator, its slots and its counters."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.slots = SlotPool(cfg.slots)
        self.outage = Outage(cfg.down_after, cfg.down_for)
        self._rng = random.Random(cfg.seed)
        self._created = int(time.time())
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        """Zero the counters (and reseed, when ``seed`` is given)."""
        if seed is not None:
            self._rng = random.Random(seed)
        self._started = time.monotonic()
        self._requests = 0
        self._completed = 0
        self._latency_total = 0.0
        self._errors: Counter[str] = Counter()
        self._keys: set[str] = set()  # sha256 prefixes of the bearer tokens seen, never the tokens
        self._embedded = 0  # texts embedded on /v1/embeddings
        self.slots.reset()

    def stats(self) -> dict[str, Any]:
        """Counters since the last reset, as served on GET /sim/stats."""
        wall = time.monotonic() - self._started
        busy = self.slots.busy_slot_seconds()
        return {
            "model": self.cfg.model,
            "requests": self._requests,
            "completed": self._completed,
            "errors": dict(self._errors),
            "in_flight": self.slots.in_service,
            "queued": self.slots.queued,
            "busy_slot_seconds": busy,
            "slots": self.cfg.slots,
            "wall_s": wall,
            "utilisation": busy / (self.cfg.slots * wall) if wall > 0 else 0.0,
            "mean_latency_s": self._latency_total / self._completed if self._completed else 0.0,
            "mean_queue_wait_s": self.slots.mean_queue_wait(),
            "api_key_sha256": sorted(self._keys),
            "texts_embedded": self._embedded,
            "down": self.outage.down(),
            "outages": self.outage.windows,
            "config": {k: _finite(v) for k, v in asdict(self.cfg).items()},
        }

    async def chat(self, request: Request) -> Response:
        """POST /v1/chat/completions."""
        arrived = time.monotonic()
        self._requests += 1
        number = self._requests
        self._note_key(request)
        rng = random.Random(self._rng.getrandbits(64))
        if self.outage.on_request(number):
            return self.refuse()
        try:
            raw = await request.body()
            body = json.loads(raw)
        except ValueError as exc:
            self._errors["bad_request"] += 1
            return _error(400, f"the request body is not valid JSON: {exc}", "invalid_request_error")
        try:
            prompt, system, prompt_chars = _read_messages(body)
        except ValueError as exc:
            self._errors["bad_request"] += 1
            return _error(400, str(exc), "invalid_request_error")
        failing = rng.random() < self.cfg.error_rate
        kind = rng.choice(self.cfg.error_kinds)
        latency = draw_latency(rng, self.cfg.median_s, self.cfg.sigma)
        if failing:
            self._errors[kind] += 1
        if failing and kind == "429":
            return _error(429, "simulated rate limit", "rate_limit_error", {"Retry-After": "1"})
        async with self.slots.slot():
            if failing and kind == "500":
                await _hold(request, latency / 10)
                return _error(500, "simulated internal server error", "server_error")
            if failing and kind == "hang":
                if await _hold(request, self.cfg.hang_s):
                    return _error(504, f"simulated hang: no answer after {self.cfg.hang_s} s", "timeout")
                self._errors["client_disconnect"] += 1
                return Response(status_code=499)
            if not await _hold(request, latency):
                self._errors["client_disconnect"] += 1
                return Response(status_code=499)
            malformed = failing and kind == "malformed"
            text = malformed_answer(prompt, rng) if malformed else build_answer(prompt, rng, system)
        if failing and kind in _ANSWER_FAULTS:
            text, finish = _faulty(text, kind, rng, self.cfg.huge_chars)
        else:
            text, finish = _truncate(text, body.get("max_completion_tokens") or body.get("max_tokens"))
        self._completed += 1
        self._latency_total += time.monotonic() - arrived
        completion = self._completion(number, text, finish, prompt_chars)
        if failing and kind == "bad_json":
            encoded = json.dumps(completion)
            return Response(encoded[: len(encoded) // 2], media_type="application/json")
        return JSONResponse(completion)

    def refuse(self) -> Response:
        """The answer of a server that is down (an outage): 503 at once."""
        self._errors["down"] += 1
        return _error(503, "simulated outage: the server is down", "server_error")

    def _completion(self, number: int, text: str, finish: str, prompt_chars: int) -> dict[str, Any]:
        prompt_tokens = math.ceil(prompt_chars / _CHARS_PER_TOKEN)
        completion_tokens = math.ceil(len(text) / _CHARS_PER_TOKEN)
        return {
            "id": f"chatcmpl-sim-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.cfg.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    async def embeddings(self, request: Request) -> Response:
        """POST /v1/embeddings: a deterministic unit vector per input text, seeded by its hash."""
        self._note_key(request)
        try:
            body = json.loads(await request.body())
            texts, dim = _read_embedding_request(body)
        except ValueError as exc:
            self._errors["bad_request"] += 1
            return _error(400, str(exc), "invalid_request_error")
        self._embedded += len(texts)
        encoding = body.get("encoding_format")
        data = [{"object": "embedding", "index": i, "embedding": _embed(text, dim, encoding)}
                for i, text in enumerate(texts)]
        tokens = sum(math.ceil(len(text) / _CHARS_PER_TOKEN) for text in texts)
        return JSONResponse({"object": "list", "data": data, "model": body.get("model") or self.cfg.model,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _note_key(self, request: Request) -> None:
        token = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if token:
            self._keys.add(hashlib.sha256(token.encode()).hexdigest()[:16])

    def models(self) -> dict[str, Any]:
        """The model list served on GET /v1/models."""
        entry = {"id": self.cfg.model, "object": "model", "created": self._created}
        return {"object": "list", "data": [{**entry, "owned_by": "evoforge-llm-sim"}]}


def build_app(cfg: SimConfig) -> Starlette:
    """The simulator as an ASGI app (OpenAI routes under /v1, bookkeeping under /sim)."""
    sim = Simulator(cfg)

    async def models(_: Request) -> Response:
        return sim.refuse() if sim.outage.down() else JSONResponse(sim.models())

    async def outage(request: Request) -> Response:
        try:
            seconds = float((await request.json()).get("seconds"))
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"bad outage body (want {{\"seconds\": S}}): {exc}", "invalid_request_error")
        sim.outage.start(seconds)
        return JSONResponse({"down": sim.outage.down(), "seconds": _finite(seconds)})

    async def stats(_: Request) -> Response:
        return JSONResponse(sim.stats())

    async def reset(request: Request) -> Response:
        raw = await request.body()
        try:
            seed = (await request.json()).get("seed") if raw.strip() else None
            if seed is not None and not isinstance(seed, int):
                raise ValueError("seed must be an integer")
        except (ValueError, AttributeError) as exc:
            return _error(400, f"bad reset body: {exc}", "invalid_request_error")
        sim.reset(seed)
        return JSONResponse({"reset": True, "seed": seed})

    app = Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", sim.chat, methods=["POST"]),
            Route("/v1/embeddings", sim.embeddings, methods=["POST"]),
            Route("/sim/stats", stats, methods=["GET"]),
            Route("/sim/reset", reset, methods=["POST"]),
            Route("/sim/outage", outage, methods=["POST"]),
        ]
    )
    app.state.simulator = sim
    return app


def serve(cfg: SimConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted; port 0 picks a free port (the printed line names it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    bound = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    print(
        f"evoforge llm-sim listening on http://{url_host}:{bound}/v1 "
        f"(model {cfg.model}, median {cfg.median_s} s, slots {cfg.slots})",
        flush=True,
    )
    config = uvicorn.Config(
        build_app(cfg), log_level="warning", access_log=False, timeout_graceful_shutdown=1
    )
    uvicorn.Server(config).run(sockets=[sock])


async def _hold(request: Request, seconds: float) -> bool:
    """Wait ``seconds``; False as soon as the client has gone away."""
    deadline = time.monotonic() + seconds
    while not await request.is_disconnected():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        await asyncio.sleep(min(remaining, _POLL_S))
    return False


def _read_messages(body: Any) -> tuple[str, str, int]:
    """(the last user message, the system messages, total characters of all messages), or ValueError."""
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    if body.get("stream"):
        raise ValueError("streaming is not supported by evoforge llm-sim; send stream=false")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    texts = []
    for message in messages:
        if not isinstance(message, dict):
            raise ValueError("each message must be an object with 'role' and 'content'")
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        texts.append((message.get("role"), str(content)))
    prompt = next((text for role, text in reversed(texts) if role == "user"), "")
    system = "\n".join(text for role, text in texts if role in ("system", "developer"))
    return prompt, system, sum(len(text) for _, text in texts)


def _read_embedding_request(body: Any) -> tuple[list[str], int]:
    """(the input texts, the vector dimension) of an embeddings request, or ValueError."""
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("'input' must be a string or a non-empty list of strings (no token ids)")
    dim = body.get("dimensions") or EMBEDDING_DIM
    if not isinstance(dim, int) or not 1 <= dim <= 4096:
        raise ValueError("'dimensions' must be an integer between 1 and 4096")
    if body.get("encoding_format") not in (None, "float", "base64"):
        raise ValueError("'encoding_format' must be 'float' or 'base64'")
    return texts, dim


def _embed(text: str, dim: int, encoding: str | None) -> list[float] | str:
    """A unit vector drawn from a generator seeded by the text's hash (as floats or base64 float32)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    vector /= np.linalg.norm(vector)
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode()
    return vector.tolist()


def _truncate(text: str, max_tokens: Any) -> tuple[str, str]:
    """Cut an answer longer than ``max_tokens`` the way a server does (finish_reason "length")."""
    if isinstance(max_tokens, int) and max_tokens > 0:
        limit = max_tokens * _CHARS_PER_TOKEN
        if len(text) > limit:
            return text[:limit], "length"
    return text, "stop"


def _finite(value: Any) -> Any:
    """`value`, with an infinite float as the string "inf" (JSON has no infinity)."""
    return str(value) if isinstance(value, float) and math.isinf(value) else value


def _faulty(text: str, kind: str, rng: random.Random, huge_chars: int) -> tuple[str, str]:
    """(text, finish_reason) of an answer fault: cut mid-way ("truncated": finish "length";
    "cut": finish "stop"), or grown to `huge_chars` characters ("huge")."""
    if kind == "huge":
        filler = "# " + "the answer goes on and on " * 4 + "\n"
        return (text + filler * (huge_chars // len(filler) + 1))[:huge_chars], "stop"
    cut = text[: int(len(text) * rng.uniform(0.3, 0.7))]
    return cut, "length" if kind == "truncated" else "stop"


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}
    return JSONResponse(body, status_code=status, headers=headers)
