"""Choose the LLM backend: an OpenAI-compatible server, a router over several, or the offline proposer."""

from __future__ import annotations

from evoforge.infra.config import EndpointConfig, LLMConfig, RunConfig
from evoforge.infra.llm import keys
from evoforge.infra.llm.circuit import Circuit
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm.router import Router
from evoforge.infra.llm.scheduler import ScheduledBackend, Scheduler, scheduler_of, unscheduled
from evoforge.infra.llm.spending import Spending
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.offline.backend import OfflineBackend


def make_backend(cfg: LLMConfig, seed: int, spending: Spending | None = None) -> LLMBackend:
    """The backend this config names: `llm.endpoints` means a router over them, a `base_url` one
    server, and neither the offline proposer (no LLM). Its servers' calls charge `spending`."""
    if cfg.endpoints:
        backends = [(_openai(cfg, e.base_url, e.model, endpoint_key(cfg, e, i), seed + i, spending,
                             e.context_window), e.weight) for i, e in enumerate(cfg.endpoints)]
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
    return _openai(cfg, endpoint.base_url, endpoint.model, endpoint_key(cfg, endpoint, where), seed, spending,
                   endpoint.context_window)


def _openai(cfg: LLMConfig, base_url: str, model: str | None, key: str | None, seed: int,
            spending: Spending | None, context_window: int | None = None) -> OpenAIBackend:
    """One server's backend; its window: the endpoint's, else llm.context_window, else the server's."""
    return OpenAIBackend(base_url=base_url, model=model, api_key=key, timeout_s=cfg.timeout_s,
                         max_retries=cfg.max_retries, backoff_s=cfg.backoff_s, seed=seed,
                         max_answer_chars=cfg.max_answer_chars, circuit=cfg.circuit, spending=spending,
                         context_window=context_window or cfg.context_window)


def scheduled(llm: LLMBackend, cfg: RunConfig) -> LLMBackend:
    """`llm` behind a scheduler of its own (`scheduler.slots` calls at once, by default as many as
    the research stage's workers: the calls a run makes at once when it only proposes), or `llm`
    itself when `scheduler.enabled` is off, it is scheduled already or it is the offline proposer
    (no server: nothing to share)."""
    if not cfg.scheduler.enabled or isinstance(llm, ScheduledBackend) or llm.name == "offline":
        return llm
    slots = scheduler_slots(cfg)
    return ScheduledBackend(llm, Scheduler(slots, window_s=cfg.scheduler.window_s,
                                           aging_s=cfg.scheduler.aging_s))


def circuits_of(llm: LLMBackend) -> list[Circuit]:
    """The circuit breakers behind a backend (its scheduler's too): one server's, a router's
    endpoints', or none (the offline proposer, or any other backend without a server to lose)."""
    llm = unscheduled(llm)
    if isinstance(llm, OpenAIBackend):
        return [llm.circuit]
    if isinstance(llm, Router):
        return llm.circuits()
    return []


def scheduler_slots(cfg: RunConfig) -> int:
    """The LLM calls a run's scheduler lets through at once: `scheduler.slots`, else the research
    stage's configured workers."""
    return cfg.scheduler.slots or cfg.engine.workers.get("research", 8)


def prefetch(cfg: RunConfig) -> int:
    """Proposals the research stage prepares beyond the scheduler's slots (`scheduler.prefetch`,
    by default half the slots): 0 without a scheduler or without an LLM (the offline proposer)."""
    if not cfg.scheduler.enabled or not (cfg.llm.base_url or cfg.llm.endpoints):
        return 0
    extra = cfg.scheduler.prefetch
    return (scheduler_slots(cfg) + 1) // 2 if extra is None else extra


def follow_research_workers(llm: LLMBackend, cfg: RunConfig, workers: int) -> None:
    """Adaptive control moved the research stage to `workers`: its scheduler's slots follow (the
    workers less the prefetch), unless `scheduler.slots` fixes them."""
    scheduler = scheduler_of(llm)
    if scheduler is not None and not cfg.scheduler.slots:
        scheduler.resize(workers - prefetch(cfg))
