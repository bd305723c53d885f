"""Choose the LLM backend: an OpenAI-compatible server when configured, else the offline proposer."""

from __future__ import annotations

from evoforge.infra.config import LLMConfig
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.offline.backend import OfflineBackend


def make_backend(cfg: LLMConfig, seed: int) -> LLMBackend:
    """The backend this config names; no base_url means the offline proposer (no LLM)."""
    if not cfg.base_url:
        return OfflineBackend(seed=seed)
    return OpenAIBackend(
        base_url=cfg.base_url,
        model=cfg.model,
        api_key=cfg.secret_key(),
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
        backoff_s=cfg.backoff_s,
        seed=seed,
    )
