"""What an LLM endpoint says about itself over cheap GETs: its context window, how many requests it
serves at once, and whether it answers at all.

Every GET carries the endpoint's own key only and a short timeout; a server that says nothing
(a hosted API, llama-cpp-python's window) leaves the value None, and the config decides
(`llm.context_window`, an endpoint's `context_window`). Where each value comes from:

- vLLM: `max_model_len` on its `/v1/models` entries (the listing `check()` reads anyway);
- llama.cpp's server: `/props` at the server's root (`default_generation_settings.n_ctx` or
  `n_ctx`, and `total_slots`: the requests it serves at once);
- llama-cpp-python's server (`evoforge serve-llm`): no window anywhere (its `/v1/models` lists ids
  only and it has no `/props`), but its `/openapi.json` names it, and it serves one request at a
  time (one lock around the model), so its slots are 1.

>>> window_of([{"id": "m", "max_model_len": 32768}], "m")
32768
>>> server_root("http://127.0.0.1:8000/v1")
'http://127.0.0.1:8000'
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger("evoforge.llm.window")

DISCOVERY_TIMEOUT_S = 5.0  # a server that takes longer to describe itself is left undescribed
_LLAMA_CPP_PYTHON = "llama.cpp Python"  # in the title of llama-cpp-python's /openapi.json


@dataclass(frozen=True)
class ServerLimits:
    """What the server said: its context window and the requests it serves at once (None: unknown)."""

    context_window: int | None = None
    slots: int | None = None
    source: str = ""  # where the window came from, for the log line


def server_root(base_url: str) -> str:
    """The server's root: `base_url` without a trailing `/v1` (where llama.cpp serves `/props`)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def window_of(entries: Sequence[dict[str, Any]], model: str) -> int | None:
    """The `max_model_len` of `model`'s entry in a `/v1/models` listing (vLLM), else None."""
    for entry in entries:
        if entry.get("id") == model:
            return _positive(entry.get("max_model_len"))
    return None


async def discover(base_url: str, api_key: str | None, model: str,
                   listed: Sequence[dict[str, Any]], timeout_s: float = DISCOVERY_TIMEOUT_S) -> ServerLimits:
    """The limits the server states: from the `/v1/models` entries already `listed`, else from
    llama.cpp's `/props`, else llama-cpp-python's one slot; failures leave them None (logged)."""
    window = window_of(listed, model)
    if window is not None:
        return ServerLimits(window, None, "/v1/models max_model_len")
    root = server_root(base_url)
    async with httpx.AsyncClient(timeout=timeout_s, headers=_auth(api_key)) as client:
        props = await _get_json(client, f"{root}/props")
        if isinstance(props, dict):
            settings = props.get("default_generation_settings")
            n_ctx = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
            return ServerLimits(n_ctx or _positive(props.get("n_ctx")), _positive(props.get("total_slots")),
                                "/props n_ctx")
        spec = await _get_json(client, f"{root}/openapi.json")
        info = spec.get("info") if isinstance(spec, dict) else None
        if isinstance(info, dict) and _LLAMA_CPP_PYTHON in str(info.get("title", "")):
            return ServerLimits(None, 1, "llama-cpp-python (window not exposed)")
    return ServerLimits()


async def probe(base_url: str, api_key: str | None, timeout_s: float) -> str | None:
    """None when the server answers a cheap GET (it is up, if maybe busy), else why not.

    `/v1/models` first; when it does not answer in time (llama-cpp-python lists its models behind
    the lock its generation holds), the root's `/health`, which no server queues: any HTTP answer
    but 429/5xx means a process that answers. Refused, hung or 5xx: down."""
    why = ""
    async with httpx.AsyncClient(timeout=timeout_s, headers=_auth(api_key)) as client:
        for url in (f"{base_url.rstrip('/')}/models", f"{server_root(base_url)}/health"):
            try:
                response = await client.get(url)
            except httpx.TimeoutException:
                why = f"no answer to GET {url.rsplit('/', 1)[-1]} within {timeout_s:g} s"
                continue
            except httpx.HTTPError as exc:
                return f"{type(exc).__name__} on GET {url.rsplit('/', 1)[-1]}"
            if response.status_code == 429 or response.status_code >= 500:
                return f"HTTP {response.status_code} on GET {url.rsplit('/', 1)[-1]}"
            return None
    return why


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    """The JSON body of GET `url`, or None when there is none (logged at debug: most servers lack
    one of these routes)."""
    try:
        response = await client.get(url)
        if response.status_code != 200:
            return None
        return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        log.info("GET %s: %s (the server's limits stay unknown there)", url, type(exc).__name__)
        return None


def _auth(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
