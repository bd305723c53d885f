"""Where a run's config finds its LLM keys, and which key each endpoint gets: one place for both.

A key is read late, from the environment of the process that calls the LLM, and goes only to its
own endpoint (``endpoint_key``): an endpoint with ``api_key_env`` gets that variable's value; the
main key (``llm.api_key``, else ``OPENAI_API_KEY``) goes to the main ``llm.base_url`` only, and to
an ``analyze.llm`` or ``task_model.llm`` on that same base URL; any other endpoint gets no key (the
placeholder ``NO_KEY``, which is not a secret). ``llm.endpoints`` has no main URL: each names its
key (``api_key_env: OPENAI_API_KEY`` is allowed). The ``openai`` embedder gets
``cognition.embedding_api_key_env``'s value, else ``OPENAI_API_KEY`` only when
``cognition.embedding_base_url`` is unset (the SDK's own endpoint, the key's home), else no key.

This module also lists the variables a config may read a key from, so that whatever must keep
keys away from candidates (evaluators/isolation_notice.py, stages/evaluation/dask_executor.py)
covers them all. A variable set to the empty string holds no key. Example::

    key_env_names(cfg)       # ['ANALYZE_KEY', 'OPENAI_API_KEY']
    keys_in_reach(cfg)       # ['OPENAI_API_KEY']: the ones set (non-empty) here
    endpoint_key(cfg.llm, "http://other:8000/v1", None, "analyze.llm")   # None: not the main URL
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from evoforge.infra.config import CognitionConfig, ConfigError, EndpointConfig, LLMConfig, RunConfig

MAIN_KEY_ENV = "OPENAI_API_KEY"
CONFIG_KEY = "llm.api_key"  # a key written in the config file itself (not from the environment)
NO_KEY = "EMPTY"  # what goes where no key belongs: the openai client needs a string; not a secret


def configured_endpoints(cfg: RunConfig) -> list[EndpointConfig]:
    """Every endpoint the config names: the router's, the Analyzer's and the task model's."""
    return [*cfg.llm.endpoints, *(e for e in (cfg.analyze.llm, cfg.task_model.llm) if e is not None)]


def key_env_names(cfg: RunConfig) -> list[str]:
    """Every environment variable the run may read an LLM or embeddings key from, sorted."""
    names = {MAIN_KEY_ENV, *(e.api_key_env for e in configured_endpoints(cfg) if e.api_key_env)}
    if cfg.cognition.embedding_api_key_env:
        names.add(cfg.cognition.embedding_api_key_env)
    return sorted(names)


def keys_in_reach(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """The key variables set (non-empty) in `environ` (default: this process's), and ``llm.api_key``
    when the config holds a key of its own; names only, never a value."""
    env = os.environ if environ is None else environ
    names = [name for name in key_env_names(cfg) if env.get(name)]
    own = cfg.llm.api_key.get_secret_value() if cfg.llm.api_key is not None else ""
    if own and own != env.get(MAIN_KEY_ENV):
        names.append(CONFIG_KEY)
    return names


def same_url(a: object, b: object) -> bool:
    """Whether two base URLs name the same endpoint (case of scheme and host, a trailing slash)."""
    return str(a).rstrip("/").lower() == str(b).rstrip("/").lower()


def endpoint_key(llm: LLMConfig, base_url: object, api_key_env: str | None, where: str,
                 environ: Mapping[str, str] | None = None) -> str | None:
    """The key the endpoint at `base_url` gets: its `api_key_env` variable's value (unset: a
    ConfigError naming `where`), else the main key if it is the main ``llm.base_url``, else None."""
    if api_key_env is not None:
        return _required(api_key_env, f"{where}.api_key_env", environ)
    if llm.base_url is not None and same_url(base_url, llm.base_url):
        if llm.api_key is not None or environ is None:
            return llm.secret_key()
        return environ.get(MAIN_KEY_ENV) or None
    return None


def embedder_key(cognition: CognitionConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The key the ``openai`` embedder gets: ``cognition.embedding_api_key_env``'s value, else
    ``OPENAI_API_KEY`` when no ``embedding_base_url`` is set (the SDK's own endpoint), else None."""
    env = os.environ if environ is None else environ
    if cognition.embedding_api_key_env:
        return _required(cognition.embedding_api_key_env, "cognition.embedding_api_key_env", env)
    if cognition.embedding_base_url is None:
        return env.get(MAIN_KEY_ENV) or None
    return None


def _required(name: str, where: str, environ: Mapping[str, str] | None) -> str:
    key = (os.environ if environ is None else environ).get(name)
    if not key:
        raise ConfigError(f"{where}: the environment variable {name} is not set")
    return key
