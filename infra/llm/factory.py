"""Choose the LLM backend: an OpenAI-compatible server, a router over several, or the offline proposer."""

from __future__ import annotations

from evoforge.infra.config import EndpointConfig, LLMConfig
from evoforge.infra.llm import keys
from evoforge.infra.llm.circuit import Circuit
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm.router import Router
from evoforge.infra.llm.spending import Spending
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.offline.backend import OfflineBackend


def make_backend(cfg: LLMConfig, seed: int, spending: Spending | None = None) -> LLMBackend:
    """The backend this config names: `llm.endpoints` means a router over them, a `base_url` one
    server, and neither the offline proposer (no LLM). Its servers' calls charge `spending`."""
    if cfg.endpoints:
        backends = [(_openai(cfg, e.base_url, e.model, endpoint_key(cfg, e, i), seed + i, spending), e.weight)
                    for i, e in enumerate(cfg.endpoints)]
        return Router(backends, routing=cfg.routing, prices=cfg.prices, explore=cfg.explore, seed=seed)
    if not cfg.base_url:
        return OfflineBackend(seed=seed)
    return _openai(cfg, cfg.base_url, cfg.model, cfg.secret_key(), seed, spending)


def endpoint_key(cfg: LLMConfig, endpoint: EndpointConfig, index: int | str) -> str | None:
    """The endpoint's API key, read here, late: its `api_key_env` variable's, the main key if it is
    the main `llm.base_url`, else none (infra/llm/keys.py); `index` names it in an error (its place
    in llm.endpoints, or the key that holds it)."""
    where = f"llm.endpoints.{index}" if isinstance(index, int) else index
    return keys.endpoint_key(cfg, endpoint.base_url, endpoint.api_key_env, where)


def endpoint_backend(cfg: LLMConfig, endpoint: EndpointConfig, seed: int, where: str,
                     spending: Spending | None = None) -> OpenAIBackend:
    """A backend for one endpoint of its own (e.g. `analyze.llm`), with the run's LLM settings."""
    return _openai(cfg, endpoint.base_url, endpoint.model, endpoint_key(cfg, endpoint, where), seed, spending)


def _openai(cfg: LLMConfig, base_url: str, model: str | None, key: str | None, seed: int,
            spending: Spending | None) -> OpenAIBackend:
    return OpenAIBackend(base_url=base_url, model=model, api_key=key, timeout_s=cfg.timeout_s,
                         max_retries=cfg.max_retries, backoff_s=cfg.backoff_s, seed=seed,
                         max_answer_chars=cfg.max_answer_chars, circuit=cfg.circuit, spending=spending)


def circuits_of(llm: LLMBackend) -> list[Circuit]:
    """The circuit breakers behind a backend: one server's, a router's endpoints', or none (the
    offline proposer, or any other backend without a server to lose)."""
    if isinstance(llm, OpenAIBackend):
        return [llm.circuit]
    if isinstance(llm, Router):
        return llm.circuits()
    return []
