"""The LLM sections of the run configuration: the server(s), their prices, circuit and scheduler."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from evoforge.infra.config_base import HttpURL, _Section


class ModelPrice(_Section):
    """What a hosted model charges, in USD per million tokens."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class EndpointConfig(_Section):
    """One of several LLM endpoints: an OpenAI-compatible server, its model and routing weight."""

    base_url: HttpURL
    model: str | None = None  # none: the server's first model
    weight: float = Field(default=1.0, gt=0)  # weighted routing: share of calls, relative
    # environment variable holding this endpoint's key; none: the main key (OPENAI_API_KEY) only when
    # base_url is llm.base_url, else no key (infra/llm/keys.py)
    api_key_env: str | None = None
    # the model's context window in tokens; none: llm.context_window, else what the server says
    context_window: int | None = Field(default=None, ge=128)


class CircuitConfig(_Section):
    """When an LLM endpoint counts as down, how often it is probed, and when the run gives up."""

    failures: int = Field(default=5, ge=1)  # failed attempts in a row that open the circuit
    probe_s: float = Field(default=5.0, gt=0)  # while open: seconds between probes
    give_up_s: float = Field(default=600.0, gt=0)  # an outage this long stops the run (resumable)


class LLMConfig(_Section):
    """Which OpenAI-compatible server to talk to; no base_url means the offline proposer."""

    base_url: HttpURL | None = None
    model: str | None = None
    # a secret: masked in repr, and left out of every dump (Prefect parameters, config.json, MLflow)
    api_key: SecretStr | None = Field(default=None, repr=False, exclude=True)

    def secret_key(self) -> str | None:
        """The API key: this config's, else OPENAI_API_KEY from the environment (read here, late,
        so that a flow started from a deployment finds it without it passing through Prefect)."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return os.environ.get("OPENAI_API_KEY") or None
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=4, ge=0, le=20)
    backoff_s: float = Field(default=1.0, ge=0)
    temperature: float = Field(default=0.8, ge=0, le=2)
    max_tokens: int = Field(default=4096, ge=16)
    answer_format: Literal["diff", "rewrite", "mixed"] = "mixed"
    diff_fraction: float = Field(default=0.7, ge=0, le=1)
    endpoints: list[EndpointConfig] = Field(default_factory=list)  # several LLMs; empty: base_url/model
    routing: Literal["weighted", "bandit"] = "weighted"  # how endpoints share the calls
    explore: float = Field(default=0.1, ge=0, le=1)  # bandit: share of calls routed uniformly at random
    prices: dict[str, ModelPrice] = Field(default_factory=dict)  # by model name; cost in status and MLflow
    max_answer_chars: int = Field(default=1_000_000, ge=1000)  # a larger answer is cut off unread
    circuit: CircuitConfig = CircuitConfig()  # the breaker that pauses the run while the LLM is down
    # the model's context window in tokens; none: what the server says (vLLM, llama.cpp), else unknown
    context_window: int | None = Field(default=None, ge=128)

    @model_validator(mode="after")
    def _one_way_to_name_the_server(self) -> LLMConfig:
        if self.endpoints and (self.base_url or self.model):
            raise ValueError("llm.endpoints replaces llm.base_url and llm.model (also set by "
                             "--llm-base-url / --llm-model / EVOFORGE_LLM_*): set one or the other")
        return self


class SchedulerConfig(_Section):
    """The LLM scheduler: slots per endpoint, handed out by priority (infra/llm/scheduler.py)."""

    enabled: bool = True  # off: every stage's calls go to the LLM at once, unordered
    slots: int | None = Field(default=None, ge=1)  # calls at once per endpoint; None: research's workers
    # proposals the research stage prepares beyond the slots, waiting for one so that no slot idles
    # between two calls; None: half the slots (0: none)
    prefetch: int | None = Field(default=None, ge=0)
    window_s: float = Field(default=10.0, gt=0)  # a wait this recent means the LLM binds
    aging_s: float | None = Field(default=60.0, gt=0)  # a waiting call moves up a priority per this
